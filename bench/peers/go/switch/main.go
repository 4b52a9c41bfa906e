// SPDX-License-Identifier: MIT

// switch: two goroutines each call runtime.Gosched() N times on one
// processor (GOMAXPROCS 1). Value: elapsed / 2N, ns/switch. The clock runs
// in the main goroutine from before the first `go` to after the wait.
package main

import (
	"runtime"
	"sync"
	"time"

	"weft.bench/peers/internal/peer"
)

func main() {
	runtime.GOMAXPROCS(1)
	n := peer.N(10_000_000)

	var wg sync.WaitGroup
	made := make([]int, 2) // yields made by each goroutine
	start := time.Now()
	for g := range made {
		wg.Add(1)
		go func(count *int) {
			defer wg.Done()
			for i := 0; i < n; i++ {
				runtime.Gosched()
				*count++
			}
		}(&made[g])
	}
	wg.Wait()
	elapsed := time.Since(start)

	peer.Check(made[0]+made[1] == 2*n, "yields %d != %d", made[0]+made[1], 2*n)
	peer.Print("switch", peer.PerOp(elapsed, 2*n), 1, "ns/switch")
}

// SPDX-License-Identifier: MIT

// spawn: the main goroutine starts N goroutines, each adds 1 to a shared
// atomic counter, and waits for all of them with a sync.WaitGroup. All
// processors (GOMAXPROCS left at its default). Value: elapsed / N, ns/task.
package main

import (
	"sync"
	"sync/atomic"
	"time"

	"weft.bench/peers/internal/peer"
)

func main() {
	n := peer.N(1_000_000)

	var counter atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	wg.Add(n)
	for i := 0; i < n; i++ {
		go func() {
			counter.Add(1)
			wg.Done()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	peer.Check(counter.Load() == int64(n), "counter %d != %d", counter.Load(), n)
	peer.Print("spawn", peer.PerOp(elapsed, n), 1, "ns/task")
}

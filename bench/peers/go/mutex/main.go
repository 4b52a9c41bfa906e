// SPDX-License-Identifier: MIT

// mutex: 4 goroutines each lock a sync.Mutex, increment a plain shared
// int64, and unlock, N times; the counter must end at 4N. All processors.
// Value: elapsed / 4N, ns/op.
package main

import (
	"sync"
	"time"

	"weft.bench/peers/internal/peer"
)

const lockers = 4

func main() {
	n := peer.N(1_000_000)

	var mu sync.Mutex
	var counter int64 // guarded by mu alone
	var wg sync.WaitGroup
	wg.Add(lockers)
	start := time.Now()
	for g := 0; g < lockers; g++ {
		go func() {
			defer wg.Done()
			for i := 0; i < n; i++ {
				mu.Lock()
				counter++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	peer.Check(counter == int64(lockers*n), "counter %d != %d", counter, lockers*n)
	peer.Print("mutex", peer.PerOp(elapsed, lockers*n), 1, "ns/op")
}

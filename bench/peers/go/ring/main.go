// SPDX-License-Identifier: MIT

// ring: M=1,000 goroutines in a ring, each with a chan int64 mailbox of
// capacity 16, each forwarding the token it receives, decremented, to the
// next; the token starts at N in the first mailbox, and the goroutine that
// receives 0 sends it to main on done. One processor (GOMAXPROCS 1).
// Value: elapsed / N, ns/hop.
//
// Spawning is not timed: main waits until every goroutine has started and
// is about to wait on its mailbox (a WaitGroup), then the clock runs from
// before the first send to main's receipt of the final token. Afterwards
// the one that received 0 closes its successor's mailbox and each in turn
// closes the next one's, so all exit.
package main

import (
	"runtime"
	"sync"
	"time"

	"weft.bench/peers/internal/peer"
)

const m = 1000

func main() {
	runtime.GOMAXPROCS(1)
	n := peer.N(1_000_000)

	boxes := make([]chan int64, m)
	for i := range boxes {
		boxes[i] = make(chan int64, 16)
	}
	done := make(chan int64, 1)
	var started, exited sync.WaitGroup
	started.Add(m)
	exited.Add(m)
	for i := 0; i < m; i++ {
		go func(in <-chan int64, next chan<- int64) {
			defer exited.Done()
			defer close(next) // ends the ring behind the final token
			started.Done()
			for t := range in {
				if t == 0 {
					done <- t
					return
				}
				next <- t - 1
			}
		}(boxes[i], boxes[(i+1)%m])
	}
	started.Wait()

	start := time.Now()
	boxes[0] <- int64(n)
	token := <-done
	elapsed := time.Since(start)
	exited.Wait()

	peer.Check(token == 0, "final token %d != 0", token)
	peer.Print("ring", peer.PerOp(elapsed, n), 1, "ns/hop")
}

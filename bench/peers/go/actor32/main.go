// SPDX-License-Identifier: MIT

// actor32: ask's actor goroutine owning a counter (chan mailbox of
// capacity 64, internal/askpeer) and 32 client goroutines, each making N/32 sequential asks on a
// reply channel of its own, with GOMAXPROCS = 2 (weft's 2 workers). Value:
// elapsed / N, ns/ask. The clock runs from before the actor's `go` to
// after the clients have finished and the actor has exited.
package main

import (
	"runtime"
	"sync"
	"time"

	"weft.bench/peers/internal/askpeer"
	"weft.bench/peers/internal/peer"
)

const clients = 32

func main() {
	n := peer.N(100_000)
	n -= n % clients
	if n == 0 {
		n = clients
	}
	runtime.GOMAXPROCS(2)
	mailbox := make(chan askpeer.Request, 64)
	exited := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var max int64

	start := time.Now()
	go askpeer.Counter(mailbox, exited) // ask's actor
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reply := make(chan int64, 1)
			var last int64
			for i := 0; i < n/clients; i++ {
				mailbox <- askpeer.Request{Add: 1, Reply: reply}
				if v := <-reply; v > last {
					last = v
				}
			}
			mu.Lock()
			if last > max {
				max = last
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(mailbox)
	<-exited
	elapsed := time.Since(start)

	peer.Check(max == int64(n), "largest reply %d != %d", max, n)
	peer.Print("actor32", peer.PerOp(elapsed, n), 1, "ns/ask")
}

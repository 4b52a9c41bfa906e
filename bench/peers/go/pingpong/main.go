// SPDX-License-Identifier: MIT

// pingpong: two goroutines and two unbuffered chan int64 on one processor.
// The pinger sends 0 .. N-1 and adds up the answers, then closes ping; the
// echo goroutine answers every value with value + 1 until ping is closed.
// Value: elapsed / N, ns/roundtrip.
package main

import (
	"runtime"
	"sync"
	"time"

	"weft.bench/peers/internal/peer"
)

func main() {
	runtime.GOMAXPROCS(1)
	n := int64(peer.N(1_000_000))

	ping, pong := make(chan int64), make(chan int64)
	var sum int64
	var wg sync.WaitGroup
	wg.Add(2)
	start := time.Now()
	go func() { // echo
		defer wg.Done()
		for v := range ping {
			pong <- v + 1
		}
	}()
	go func() { // pinger
		defer wg.Done()
		for i := int64(0); i < n; i++ {
			ping <- i
			sum += <-pong
		}
		close(ping)
	}()
	wg.Wait()
	elapsed := time.Since(start)

	want := n*(n-1)/2 + n
	peer.Check(sum == want, "sum %d != %d", sum, want)
	peer.Print("pingpong", peer.PerOp(elapsed, int(n)), 1, "ns/roundtrip")
}

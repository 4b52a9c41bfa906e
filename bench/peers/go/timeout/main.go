// SPDX-License-Identifier: MIT

// timeout: pingpong where every receive waits at most 1 s. Two goroutines,
// two unbuffered chan int64, one processor; the echo goroutine makes exactly
// N receives. Each goroutine owns one time.Timer and reuses it, as careful
// Go code does: Reset before the select on the channel and the timer, Stop
// after it (and drain the timer's channel if Stop reports it had fired, the
// Go 1.19 rule). A timeout fails the run. Value: elapsed / N, ns/roundtrip.
package main

import (
	"runtime"
	"sync"
	"time"

	"weft.bench/peers/internal/peer"
)

const limit = time.Second

// deadline is one goroutine's reusable timer, stopped with its channel
// empty between receives.
type deadline struct {
	t *time.Timer
}

func newDeadline() deadline {
	t := time.NewTimer(limit)
	if !t.Stop() {
		<-t.C
	}
	return deadline{t}
}

// recv receives from ch within limit.
func (d deadline) recv(ch <-chan int64) int64 {
	d.t.Reset(limit)
	select {
	case v := <-ch:
		if !d.t.Stop() {
			<-d.t.C
		}
		return v
	case <-d.t.C:
		peer.Check(false, "receive timed out")
		return 0
	}
}

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
		d := newDeadline()
		for i := int64(0); i < n; i++ {
			pong <- d.recv(ping) + 1
		}
	}()
	go func() { // pinger
		defer wg.Done()
		d := newDeadline()
		for i := int64(0); i < n; i++ {
			ping <- i
			sum += d.recv(pong)
		}
	}()
	wg.Wait()
	elapsed := time.Since(start)

	want := n*(n-1)/2 + n
	peer.Check(sum == want, "sum %d != %d", sum, want)
	peer.Print("timeout", peer.PerOp(elapsed, int(n)), 1, "ns/roundtrip")
}

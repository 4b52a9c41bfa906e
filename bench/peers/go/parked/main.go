// SPDX-License-Identifier: MIT

// parked: N goroutines on one processor, each blocked receiving from its
// own unbuffered chan int64. Peak RSS (VmHWM) is read before the first
// channel is made and again once every goroutine has started; then the main
// goroutine sends each its ordinal and waits for all; the sum of what they
// received is checked. Value: (peak RSS after - before) / N, bytes/task.
package main

import (
	"runtime"
	"sync"
	"sync/atomic"

	"weft.bench/peers/internal/peer"
)

func main() {
	runtime.GOMAXPROCS(1)
	n := peer.N(100_000)

	var started, sum atomic.Int64
	var wg sync.WaitGroup
	before := peer.PeakRSS()
	chans := make([]chan int64, n)
	wg.Add(n)
	for i := range chans {
		ch := make(chan int64)
		chans[i] = ch
		go func() {
			defer wg.Done()
			started.Add(1)
			sum.Add(<-ch)
		}()
	}
	for started.Load() < int64(n) {
		runtime.Gosched()
	}
	runtime.Gosched() // the last one started may not have blocked yet
	after := peer.PeakRSS()
	for i, ch := range chans {
		ch <- int64(i)
	}
	wg.Wait()

	want := int64(n) * int64(n-1) / 2
	peer.Check(sum.Load() == want, "sum %d != %d", sum.Load(), want)
	peer.Print("parked", float64(after-before)/float64(n), 0, "bytes/task")
}

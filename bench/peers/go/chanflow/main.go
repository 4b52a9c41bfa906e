// SPDX-License-Identifier: MIT

// chanflow: 4 consumer and 4 producer goroutines share one chan int64 of
// capacity 1024. N messages in all (rounded down to a multiple of 4):
// producer p sends p*N/4 .. (p+1)*N/4 - 1. Once every producer is done
// (a WaitGroup) the main goroutine closes the channel; the consumers
// receive until it is drained and closed, and the sum and count of what
// they received are checked. All processors. Value: N / elapsed, Mmsg/s.
package main

import (
	"sync"
	"time"

	"weft.bench/peers/internal/peer"
)

const producers, consumers = 4, 4

type tally struct {
	sum, count int64
}

func main() {
	per := int64(peer.N(10_000_000) / producers)
	total := per * producers

	ch := make(chan int64, 1024)
	tallies := make([]tally, consumers)
	var sending, receiving sync.WaitGroup
	start := time.Now()
	receiving.Add(consumers)
	for c := range tallies {
		go func(t *tally) {
			defer receiving.Done()
			var sum, count int64
			for v := range ch {
				sum += v
				count++
			}
			t.sum, t.count = sum, count
		}(&tallies[c])
	}
	sending.Add(producers)
	for p := int64(0); p < producers; p++ {
		go func(first int64) {
			defer sending.Done()
			for v := first; v < first+per; v++ {
				ch <- v
			}
		}(p * per)
	}
	sending.Wait()
	close(ch)
	receiving.Wait()
	elapsed := time.Since(start)

	var got tally
	for _, t := range tallies {
		got.sum += t.sum
		got.count += t.count
	}
	want := total * (total - 1) / 2
	peer.Check(got.sum == want && got.count == total,
		"sum %d (want %d), count %d (want %d)", got.sum, want, got.count, total)
	peer.Print("chanflow", float64(total)/elapsed.Seconds()/1e6, 2, "Mmsg/s")
}

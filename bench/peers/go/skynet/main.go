// SPDX-License-Identifier: MIT

// skynet: a 10-ary tree of goroutines over N leaves (N rounded down to a
// power of 10; 1,000,000 by default). A leaf sends its ordinal to its
// parent; an inner node starts its 10 children, each with the node's own
// buffered channel (capacity 10) to answer on, adds up the 10 answers and
// sends the sum up. All processors. Value: elapsed, ms.
package main

import (
	"fmt"
	"os"
	"time"

	"weft.bench/peers/internal/peer"
)

// node sums the leaves first .. first+size-1 and sends the sum on up.
func node(first, size int64, up chan<- int64) {
	if size == 1 {
		up <- first
		return
	}
	answers := make(chan int64, 10)
	step := size / 10
	for i := int64(0); i < 10; i++ {
		go node(first+i*step, step, answers)
	}
	var sum int64
	for i := 0; i < 10; i++ {
		sum += <-answers
	}
	up <- sum
}

func main() {
	n := int64(peer.N(1_000_000))
	leaves := int64(1)
	for leaves <= n/10 {
		leaves *= 10
	}
	if leaves != n {
		fmt.Fprintf(os.Stderr, "skynet: N rounded down to a power of 10: %d leaves\n", leaves)
	}

	top := make(chan int64, 1)
	start := time.Now()
	go node(0, leaves, top)
	sum := <-top
	elapsed := time.Since(start)

	want := leaves * (leaves - 1) / 2
	peer.Check(sum == want, "root %d != %d", sum, want)
	peer.Print("skynet", float64(elapsed.Nanoseconds())/1e6, 1, "ms")
}

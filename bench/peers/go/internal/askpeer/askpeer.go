// SPDX-License-Identifier: MIT

// Package askpeer is the body of the ask and ask2 peers, which differ only
// in GOMAXPROCS: one actor, a goroutine owning a counter with a chan
// mailbox of capacity 64; the main goroutine makes N asks in sequence, each
// "add 1 and reply with the new value" on one reply channel it reuses for
// every ask, and waits for each reply. The clock runs from before the
// actor's `go` to after it has seen its mailbox closed and exited, as
// weft's runs from before the actor's spawn to after its exit.
package askpeer

import (
	"time"

	"weft.bench/peers/internal/peer"
)

// Request is one ask: what to add, and where to reply.
type Request struct {
	Add   int64
	Reply chan<- int64
}

// Counter is the actor: nobody else touches count. It answers each request
// with the new value until mailbox is closed, then closes exited.
func Counter(mailbox <-chan Request, exited chan<- struct{}) {
	defer close(exited)
	var count int64
	for r := range mailbox {
		count += r.Add
		r.Reply <- count
	}
}

// Run makes n asks and prints the BENCH line of the benchmark name.
func Run(name string, n int) {
	mailbox := make(chan Request, 64)
	exited := make(chan struct{})
	reply := make(chan int64, 1) // the asker's, reused for every ask
	var last int64

	start := time.Now()
	go Counter(mailbox, exited)
	for i := 0; i < n; i++ {
		mailbox <- Request{1, reply}
		last = <-reply
	}
	close(mailbox) // the actor's signal to stop
	<-exited
	elapsed := time.Since(start)

	peer.Check(last == int64(n), "last reply %d != %d", last, n)
	peer.Print(name, peer.PerOp(elapsed, n), 1, "ns/ask")
}

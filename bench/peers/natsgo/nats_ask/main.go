// SPDX-License-Identifier: MIT

// nats_ask with Go's NATS client (github.com/nats-io/nats.go): one
// connection subscribes to a subject and answers each request from its
// handler (its counter + the int64 asked, 8 bytes back); the main
// goroutine makes N nc.Request calls in sequence on another connection;
// the last answer must be N.
//
//	nats_ask [N [URL]]   (URL: $NATS_URL, else nats://127.0.0.1:4222) prints "BENCH nats_ask go <ns/ask> ns/ask"
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

func main() {
	n := int64(20000)
	url := "nats://127.0.0.1:4222"
	if len(os.Args) > 1 {
		v, err := strconv.ParseInt(os.Args[1], 10, 64)
		if err != nil || v <= 0 {
			fmt.Fprintf(os.Stderr, "bad N %q\n", os.Args[1])
			os.Exit(2)
		}
		n = v
	}
	if len(os.Args) > 2 {
		url = os.Args[2]
	} else if u := os.Getenv("NATS_URL"); u != "" {
		url = u
	}
	c, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nats_ask:", err)
		os.Exit(1)
	}
	d, err := nats.Connect(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "nats_ask:", err)
		os.Exit(1)
	}
	var count int64
	sub, err := d.Subscribe("bench.ask", func(m *nats.Msg) {
		if len(m.Data) == 8 {
			count += int64(binary.LittleEndian.Uint64(m.Data))
		}
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(count))
		m.Respond(b[:])
	})
	if err != nil || d.Flush() != nil {
		fmt.Fprintln(os.Stderr, "nats_ask: subscribe:", err)
		os.Exit(1)
	}
	var one [8]byte
	binary.LittleEndian.PutUint64(one[:], 1)
	var last int64
	t0 := time.Now()
	for i := int64(0); i < n; i++ {
		r, err := c.Request("bench.ask", one[:], 10*time.Second)
		if err != nil || len(r.Data) != 8 {
			fmt.Fprintln(os.Stderr, "nats_ask: request:", err)
			os.Exit(1)
		}
		last = int64(binary.LittleEndian.Uint64(r.Data))
	}
	elapsed := time.Since(t0)
	sub.Unsubscribe()
	c.Close()
	d.Close()
	if last != n {
		fmt.Fprintf(os.Stderr, "nats_ask: last reply %d, want %d\n", last, n)
		os.Exit(1)
	}
	fmt.Printf("BENCH nats_ask go %.0f ns/ask\n", float64(elapsed.Nanoseconds())/float64(n))
}

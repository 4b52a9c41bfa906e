// SPDX-License-Identifier: MIT

// nats_jobs with Go's NATS client (github.com/nats-io/nats.go): a
// work-queue stream and a durable pull consumer with explicit acks (as
// weft_nats_queue_new makes them); on one connection 16 goroutines
// publish N jobs in all, each with its key (nats.MsgId) and waiting for
// the stream's acknowledgement (js.Publish); on another, 16 goroutines,
// each with a pull subscription bound to the consumer, fetch one job at a
// time (Fetch(1)) and ack it synchronously (AckSync). Every key must be
// done once. The clock runs from the first publish to the last confirmed
// ack.
//
//	nats_jobs [N [URL]]   (URL: $NATS_URL, else nats://127.0.0.1:4222) prints "BENCH nats_jobs go <jobs/s> jobs/s"
package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

const side = 16

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "nats_jobs: %s: %v\n", what, err)
	os.Exit(1)
}

func main() {
	n := int64(50000)
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
	pc, err := nats.Connect(url)
	if err != nil {
		fail("connect", err)
	}
	cc, err := nats.Connect(url)
	if err != nil {
		fail("connect", err)
	}
	pjs, err := pc.JetStream()
	if err != nil {
		fail("jetstream", err)
	}
	cjs, err := cc.JetStream()
	if err != nil {
		fail("jetstream", err)
	}
	if _, err := pjs.AddStream(&nats.StreamConfig{Name: "BENCH",
		Subjects: []string{"bench.jobs"}, Retention: nats.WorkQueuePolicy,
		Storage: nats.FileStorage}); err != nil {
		fail("stream", err)
	}
	if _, err := pjs.AddConsumer("BENCH", &nats.ConsumerConfig{
		Durable: "workers", AckPolicy: nats.AckExplicitPolicy,
		AckWait: 30 * time.Second}); err != nil {
		fail("consumer", err)
	}
	seen := make([]int32, n)
	var next, done int64
	var elapsed time.Duration
	var wg sync.WaitGroup
	t0 := time.Now()
	for g := 0; g < side; g++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for {
				i := atomic.AddInt64(&next, 1) - 1
				if i >= n {
					return
				}
				key := "job-" + strconv.FormatInt(i, 10)
				if _, err := pjs.Publish("bench.jobs", []byte(key), nats.MsgId(key)); err != nil {
					fail("publish", err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			sub, err := cjs.PullSubscribe("bench.jobs", "workers", nats.Bind("BENCH", "workers"))
			if err != nil {
				fail("subscribe", err)
			}
			for atomic.LoadInt64(&done) < n {
				msgs, err := sub.Fetch(1, nats.MaxWait(100*time.Millisecond))
				if errors.Is(err, nats.ErrTimeout) {
					continue
				}
				if err != nil {
					fail("fetch", err)
				}
				for _, m := range msgs {
					key := m.Header.Get("Nats-Msg-Id")
					i, err := int64(-1), error(nil)
					if len(key) > 4 {
						i, err = strconv.ParseInt(key[4:], 10, 64)
					}
					if err != nil || i < 0 || i >= n || atomic.AddInt32(&seen[i], 1) != 1 {
						fail("a job not ours, or done twice", err)
					}
					if err := m.AckSync(); err != nil {
						fail("ack", err)
					}
					if atomic.AddInt64(&done, 1) == n {
						elapsed = time.Since(t0)
					}
				}
			}
		}()
	}
	wg.Wait()
	pc.Close()
	cc.Close()
	fmt.Printf("BENCH nats_jobs go %.0f jobs/s\n", float64(n)/elapsed.Seconds())
}

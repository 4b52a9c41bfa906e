// SPDX-License-Identifier: MIT

// fetch: N GETs (100,000) of a local HTTP/1.1 server's "Hello, World!"
// (13 bytes), 64 in flight, on keep-alive connections, with net/http's
// Client: 64 goroutines share one Client whose Transport keeps up to 64
// idle connections to the host (MaxIdleConnsPerHost; the default, 2,
// would close most connections after each request, where libcurl keeps
// them), each goroutine making its share of the requests (N/64, the first
// N%64 one more) in sequence. A request counts only if it got status 200
// and a 13-byte body; any other outcome exits 1 with nothing on stdout.
// The server is weft's own, started by bench/run and bench/compare for
// every implementation alike. All processors. Value: N / elapsed, req/s
// (ns/request on stderr).
//
// Usage: fetch [N [URL]] (URL default http://127.0.0.1:8080/).
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"weft.bench/peers/internal/peer"
)

const (
	clients = 64
	bodyLen = 13 // "Hello, World!"
)

func main() {
	n := peer.N(100_000)
	url := "http://127.0.0.1:8080/"
	if len(os.Args) > 2 {
		url = os.Args[2]
	}
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns:        clients,
		MaxIdleConnsPerHost: clients,
	}}

	oks := make([]int, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	start := time.Now()
	wg.Add(clients)
	for i := 0; i < clients; i++ {
		count := n / clients
		if i < n%clients {
			count++
		}
		go func(i, count int) {
			defer wg.Done()
			for k := 0; k < count; k++ {
				resp, err := client.Get(url)
				if err != nil {
					errs[i] = err
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					errs[i] = err
					return
				}
				if resp.StatusCode != 200 || len(body) != bodyLen {
					errs[i] = fmt.Errorf("status %d, %d body bytes", resp.StatusCode, len(body))
					return
				}
				oks[i]++
			}
		}(i, count)
	}
	wg.Wait()
	elapsed := time.Since(start)

	ok := 0
	for i := range oks {
		ok += oks[i]
		if errs[i] != nil {
			fmt.Fprintf(os.Stderr, "fetch: %s: %v\n", url, errs[i])
			os.Exit(1)
		}
	}
	peer.Check(ok == n, "%d requests succeeded (want %d)", ok, n)
	fmt.Fprintf(os.Stderr, "fetch: %d requests in %.3f s, %.0f ns/request\n",
		n, elapsed.Seconds(), peer.PerOp(elapsed, n))
	peer.Print("fetch", float64(n)/elapsed.Seconds(), 0, "req/s")
}

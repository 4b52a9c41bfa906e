// SPDX-License-Identifier: MIT

// ask: one actor goroutine owning a counter (chan mailbox of capacity 64),
// N sequential asks "add 1, reply with the new value" from the main
// goroutine on one reused reply channel, on one processor (GOMAXPROCS 1).
// Value: elapsed / N, ns/ask. The body is internal/askpeer.
package main

import (
	"runtime"

	"weft.bench/peers/internal/askpeer"
	"weft.bench/peers/internal/peer"
)

func main() {
	runtime.GOMAXPROCS(1)
	askpeer.Run("ask", peer.N(1_000_000))
}

// SPDX-License-Identifier: MIT

// ask2: the ask benchmark with Go's defaults (GOMAXPROCS = the CPUs):
// one actor goroutine owning a counter (chan mailbox of capacity 64), N
// sequential asks from the main goroutine on one reused reply channel.
// Value: elapsed / N, ns/ask. The body is internal/askpeer.
package main

import (
	"weft.bench/peers/internal/askpeer"
	"weft.bench/peers/internal/peer"
)

func main() {
	askpeer.Run("ask2", peer.N(1_000_000))
}

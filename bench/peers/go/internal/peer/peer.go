// SPDX-License-Identifier: MIT

// Package peer is what every Go peer benchmark shares: N from the command
// line, the one stdout line, the checksum failure, and peak RSS.
package peer

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// N is the first argument, or def when there is none. A bad value exits 2.
func N(def int) int {
	if len(os.Args) < 2 {
		return def
	}
	n, err := strconv.Atoi(os.Args[1])
	if err != nil || n <= 0 {
		fmt.Fprintf(os.Stderr, "bad N %q\n", os.Args[1])
		os.Exit(2)
	}
	return n
}

// Print writes `BENCH <name> go <value> <unit>`, value with prec decimals.
func Print(name string, value float64, prec int, unit string) {
	fmt.Printf("BENCH %s go %.*f %s\n", name, prec, value, unit)
}

// PerOp is elapsed / ops in nanoseconds.
func PerOp(elapsed time.Duration, ops int) float64 {
	return float64(elapsed.Nanoseconds()) / float64(ops)
}

// Check exits 1, printing nothing on stdout, when ok is false.
func Check(ok bool, format string, args ...interface{}) {
	if !ok {
		fmt.Fprintf(os.Stderr, "checksum failed: "+format+"\n", args...)
		os.Exit(1)
	}
}

// PeakRSS is VmHWM of /proc/self/status in bytes; it exits 1 if unreadable.
func PeakRSS() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if !strings.HasPrefix(line, "VmHWM:") {
				continue
			}
			rest := strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:"))
			kb, err := strconv.ParseInt(strings.TrimSuffix(rest, " kB"), 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	fmt.Fprintln(os.Stderr, "cannot read VmHWM from /proc/self/status")
	os.Exit(1)
	return 0
}

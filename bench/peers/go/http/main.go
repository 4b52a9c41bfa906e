// SPDX-License-Identifier: MIT

// http: the benchmark's plaintext HTTP/1.1 server, a goroutine per
// connection on a raw net.TCPConn (no HTTP library), keep-alive and
// pipelining. Every request head (everything up to an empty line) in what
// has been read gets the fixed response; the answers to one read go out
// in one write. All processors.
//
// Usage: http [PORT] (0 or none: any free port). It listens on 127.0.0.1
// and prints `LISTEN <port>` on stderr once it accepts.
package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strconv"
)

var (
	response = []byte("HTTP/1.1 200 OK\r\nContent-Length: 13\r\nContent-Type: text/plain\r\n\r\nHello, World!")
	headEnd  = []byte("\r\n\r\n")
)

const bufSize = 16 << 10

func serve(conn *net.TCPConn) {
	defer conn.Close()
	in := make([]byte, bufSize)
	out := make([]byte, 0, bufSize)
	kept := 0 // bytes of an unfinished request head at in[:kept]
	for {
		n, err := conn.Read(in[kept:])
		if n == 0 || err != nil {
			return
		}
		data := in[:kept+n]
		out = out[:0]
		for {
			i := bytes.Index(data, headEnd)
			if i < 0 {
				break
			}
			data = data[i+len(headEnd):]
			out = append(out, response...)
		}
		kept = copy(in, data)
		if kept == len(in) {
			return // a request head that does not fit
		}
		if len(out) > 0 {
			if _, err := conn.Write(out); err != nil {
				return
			}
		}
	}
}

func main() {
	port := 0
	if len(os.Args) > 1 {
		p, err := strconv.Atoi(os.Args[1])
		if err != nil || p < 0 || p > 65535 {
			fmt.Fprintf(os.Stderr, "bad port %q\n", os.Args[1])
			os.Exit(2)
		}
		port = p
	}
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		fmt.Fprintln(os.Stderr, "http:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "LISTEN %d\n", ln.Addr().(*net.TCPAddr).Port)
	for {
		conn, err := ln.AcceptTCP()
		if err != nil {
			fmt.Fprintln(os.Stderr, "http: accept:", err)
			continue
		}
		// Go sets TCP_NODELAY on every TCP connection already.
		go serve(conn)
	}
}

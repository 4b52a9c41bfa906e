// SPDX-License-Identifier: MIT

// https: the http benchmark's server over TLS (crypto/tls), a goroutine
// per connection on a raw tls.Conn (no HTTP library), keep-alive and
// pipelining, exactly as bench/peers/go/http does over TCP. ALPN
// http/1.1. All processors.
//
// Usage: https -T CERT KEY [PORT] (0 or none: any free port). It listens
// on 127.0.0.1 and prints `LISTEN <port>` on stderr once it accepts.
package main

import (
	"bytes"
	"crypto/tls"
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

func serve(conn net.Conn) {
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
	if len(os.Args) < 4 || os.Args[1] != "-T" {
		fmt.Fprintln(os.Stderr, "usage: https -T CERT KEY [PORT]")
		os.Exit(2)
	}
	cert, err := tls.LoadX509KeyPair(os.Args[2], os.Args[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, "https:", err)
		os.Exit(1)
	}
	port := 0
	if len(os.Args) > 4 {
		p, err := strconv.Atoi(os.Args[4])
		if err != nil || p < 0 || p > 65535 {
			fmt.Fprintf(os.Stderr, "bad port %q\n", os.Args[4])
			os.Exit(2)
		}
		port = p
	}
	tcp, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		fmt.Fprintln(os.Stderr, "https:", err)
		os.Exit(1)
	}
	ln := tls.NewListener(tcp, &tls.Config{
		Certificates: []tls.Certificate{cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	fmt.Fprintf(os.Stderr, "LISTEN %d\n", tcp.Addr().(*net.TCPAddr).Port)
	for {
		conn, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "https: accept:", err)
			continue
		}
		// Go sets TCP_NODELAY on every TCP connection already.
		go serve(conn)
	}
}

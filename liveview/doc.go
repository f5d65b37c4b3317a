// Package liveview serves a live web view of a run or of a node: the
// members with their devices, memory and health; the jobs with their
// progress; for each buffer a picture of its page grid per allocation
// (which pages are valid where, which are being transferred); and the
// bytes per second over each link.
//
// The page is one embedded HTML file (no build step); it opens a
// server-sent events stream and redraws on each event. Whoever serves the
// view hands a Snapshot function to Start; the server calls it from one
// goroutine, only while at least one page is open, and at most once per
// Config.Interval (250 ms by default), and sends each subscriber only the
// newest view: a slow browser skips views, it never queues them.
//
// Page grids are aggregated before they leave the process: Aggregate folds
// a buffer's page boxes into at most MaxCells boxes per allocation, in
// time proportional to the boxes and cells, not to the pages, so a buffer
// of 2^24 pages costs what a small one does.
//
// # Usage
//
//	s := liveview.Start(liveview.Config{Snapshot: func() liveview.View { … }})
//	defer s.Close()
//	http.Handle("/", s.Handler())
//
// or, to listen on an address of its own until Close or ctx ends:
//
//	ui, err := liveview.Serve(ctx, "127.0.0.1:8090", liveview.Config{Snapshot: …})
//
// A Go program watches its own queue with package queueview
// (queueview.Serve(ctx, q, addr, queueview.Config{})).
//
// # Concurrency
//
// Snapshot is called from the server's goroutine only; it must not block
// for long (take a lock, copy, return). Close stops that goroutine, ends
// every open stream and waits for both; calling it twice is safe.
package liveview

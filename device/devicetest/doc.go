// Package devicetest provides test doubles for device.Device: Fake, an
// in-memory device that runs Go kernels serially on its own goroutine and
// counts what it did, and Faulty, a wrapper that injects errors into
// allocations and ops of any device (like pebble's errorfs).
//
// # Usage
//
//	d := devicetest.NewFake(devicetest.FakeConfig{HostUnified: false})
//	defer d.Close()
//	f := devicetest.NewFaulty(d, devicetest.FailNth(3, errors.New("boom")))
//
// # Concurrency
//
// Both are safe for concurrent use. Fake owns one goroutine, stopped by
// Close; done callbacks run on it.
package devicetest

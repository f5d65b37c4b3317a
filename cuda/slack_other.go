//go:build !linux

package cuda

func setTimerSlack(ns uintptr) {}

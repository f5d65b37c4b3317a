package cuda

import "syscall"

// setTimerSlack sets the calling thread's timer slack (PR_SET_TIMERSLACK),
// so nanosleep wakes within ns of the deadline rather than 50 µs late; 0
// restores the thread's default. The caller is locked to its thread and
// restores the default before unlocking.
func setTimerSlack(ns uintptr) {
	const prSetTimerSlack = 29
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, ns, 0)
}

package coordinator

// SetTestHookPlanned sets the hook that runs between planning a Submit's
// chunks and submitting them (nil: none).
func SetTestHookPlanned(f func()) { testHookPlanned = f }

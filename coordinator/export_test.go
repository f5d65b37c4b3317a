package coordinator

// SetTestHookPlanned sets the hook that runs between planning a Submit's
// chunks and submitting them (nil: none).
func SetTestHookPlanned(f func()) { testHookPlanned = f }

// SetTestHookReopened sets the hook that runs in a recovery once the job
// was opened again on the survivors (nil: none).
func SetTestHookReopened(f func()) { testHookReopened = f }

// Package fileread reads the files a user names (job files, kernel files,
// config files, credentials) whole, but never more than a limit: a path
// such as /dev/zero never ends, and a process that reads it to the end
// runs out of memory, which Go cannot recover from.
package fileread

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge is returned for a file that holds more than the limit.
var ErrTooLarge = errors.New("file larger than its limit")

// AtMost reads the file at path, refusing a directory, and more than limit
// bytes (ErrTooLarge) without reading past them. Errors of opening it are
// os.Open's (errors.Is(err, fs.ErrNotExist) holds for a missing file).
func AtMost(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("%s is a directory; name the file", path)
	} else if err == nil && st.Mode().IsRegular() && st.Size() > int64(limit) {
		return nil, ErrTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > limit {
		return nil, ErrTooLarge
	}
	return b, nil
}

package engine

import (
	"fmt"
	"sync"

	"github.com/acpp/acpp/coherence"
)

// Buffers is an engine's table of its own record of each buffer (B: what
// it keeps beside the buffer's ID). It is safe for concurrent use.
type Buffers[B any] struct {
	mu sync.Mutex
	m  map[BufferID]*B
}

// Put records b under id.
func (t *Buffers[B]) Put(id BufferID, b *B) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[BufferID]*B{}
	}
	t.m[id] = b
}

// Get is id's record, or an error wrapping coherence.ErrUnknownBuffer.
func (t *Buffers[B]) Get(id BufferID) (*B, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.m[id]; b != nil {
		return b, nil
	}
	return nil, fmt.Errorf("%w: buffer %d", coherence.ErrUnknownBuffer, id)
}

// Delete forgets id.
func (t *Buffers[B]) Delete(id BufferID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, id)
}

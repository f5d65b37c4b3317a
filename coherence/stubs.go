package coherence

// Stubs: the signatures callers rely on. The implementation replaces this
// file; keep every signature (extend, don't break).

// Geometry maps a buffer's element range onto its 3D page grid (P1).
type Geometry struct {
	Range    Dims // elements per dimension
	ElemSize int  // bytes per element
	PageSize Dims // elements per page per dimension
}

// NewGeometry validates and builds a geometry; a zero PageSize means
// DefaultPageSize(rng, elemSize).
func NewGeometry(rng Dims, elemSize int, pageSize Dims) (Geometry, error) { panic("unimplemented") }

// DefaultPageSize is the page size used when a buffer is created without one.
func DefaultPageSize(rng Dims, elemSize int) Dims { panic("unimplemented") }

// Pages is the page grid's extent.
func (g Geometry) Pages() Dims { panic("unimplemented") }

// NumPages is the number of pages.
func (g Geometry) NumPages() int { panic("unimplemented") }

// Bytes is the buffer's size in bytes.
func (g Geometry) Bytes() int { panic("unimplemented") }

// All is the page box of the whole buffer.
func (g Geometry) All() Box { panic("unimplemented") }

// PageRange is the page range of an accessor with the given element offset
// and range: every page fully or partly covered. ErrOutOfRange if the range
// leaves the buffer.
func (g Geometry) PageRange(offset, rng Dims) (Box, error) { panic("unimplemented") }

// ElementBox is the element box covered by a page box, clipped to the buffer.
func (g Geometry) ElementBox(pages Box) Box { panic("unimplemented") }

// View is a reinterpreted (other element size) or reshaped (other range)
// view of a buffer's bytes; its Range × ElemSize must equal the buffer's bytes.
type View struct {
	Range    Dims
	ElemSize int
}

// ViewPageRange is a page range of the underlying buffer covering at least
// the bytes an accessor of the view touches (P5).
func (g Geometry) ViewPageRange(v View, offset, rng Dims) (Box, error) { panic("unimplemented") }

// DefaultCost is the default CostModel: same memory, then same node, then
// another node.
type DefaultCost struct{}

// Cost implements CostModel.
func (DefaultCost) Cost(src, dst AllocID) int { panic("unimplemented") }

// Core is the coherence state of all buffers of one runtime or job: page
// states per allocation and the conflict-tracking history.
type Core struct{}

// New returns an empty Core.
func New(cfg Config) *Core { panic("unimplemented") }

// AddBuffer registers a buffer. With HostData set, that allocation exists and
// holds every page up to date (B5).
func (c *Core) AddBuffer(s BufferSpec) error { panic("unimplemented") }

// RemoveBuffer forgets a buffer and returns the allocations to free. The
// caller must have waited for every command group that uses it.
func (c *Core) RemoveBuffer(id BufferID) ([]Allocation, error) { panic("unimplemented") }

// Submit plans a command group: DAG edges, allocations to make on first use
// (B5), page copies (T1–T4, C3), and records its effects as if it had run
// (accessed pages up to date on the target; written pages outdated elsewhere,
// P3, P4). Command groups are planned in submission order.
func (c *Core) Submit(cg CommandGroup) (Step, error) { panic("unimplemented") }

// Complete tells the core a command group (and its copies) finished. It
// leaves the tracking state; later groups no longer depend on it.
func (c *Core) Complete(id CGID) { panic("unimplemented") }

// Release plans the explicit release of one allocation of a buffer (B1): a
// step, ordered after every earlier user of the buffer, that copies pages
// whose only valid copy is there to the host allocation of the same node,
// then frees it. id is a fresh command group ID.
func (c *Core) Release(id CGID, buf BufferID, alloc AllocID) (Step, error) { panic("unimplemented") }

// LoseNode removes every allocation on node n (it left or died, C5) and
// returns the pages that no longer have a valid copy anywhere.
func (c *Core) LoseNode(n NodeID) []LostPages { panic("unimplemented") }

// Outdated returns the pages of the box that are not up to date on alloc,
// as disjoint boxes (P2).
func (c *Core) Outdated(buf BufferID, alloc AllocID, pages Box) ([]Box, error) {
	panic("unimplemented")
}

// Allocations lists a buffer's allocations, sorted.
func (c *Core) Allocations(buf BufferID) []AllocID { panic("unimplemented") }

// Package heapstat measures what the program's data holds of the heap, for the memory
// benchmarks that report bytes per session or peer (issue 28).
package heapstat

import "runtime"

// Live is the heap the program holds after a full collection: twice, so that what the first
// one only finalised is gone too.
func Live() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

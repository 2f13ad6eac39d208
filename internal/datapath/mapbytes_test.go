package datapath

import (
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
)

// mapMemlock reads the kernel's memlock figure of one map from its descriptor's fdinfo.
func mapMemlock(t testing.TB, m *ebpf.Map) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", m.FD()))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var n int64
		if _, err := fmt.Sscanf(line, "memlock:\t%d", &n); err == nil {
			return n
		}
	}
	t.Fatalf("no memlock in fdinfo of map %v", m)
	return 0
}

// mapBytes loads the datapath with opts and returns the memlock of each of its maps.
func mapBytes(t testing.TB, opts Options) map[string]int64 {
	t.Helper()
	d := newDatapath(t, opts)
	out := map[string]int64{}
	v := reflect.ValueOf(d.objs.ilnpBPFMaps)
	for i := range v.NumField() {
		m, ok := v.Field(i).Interface().(*ebpf.Map)
		if !ok || m == nil {
			continue
		}
		out[v.Type().Field(i).Tag.Get("ebpf")] = mapMemlock(t, m)
	}
	return out
}

// The maps of a datapath sized for a million sessions (ilnpd.conf(5) SIZING: session-table-size
// 1048576, embryo-table-size 65536) take well under 500 MB of kernel memory, leaving room for
// the daemon (issue 28). 631 MB before the nonce index went and the session entry shrank, 426
// before a session's main locator pair counted in its entry (paths then held a pair per
// session; now it holds the others, path-table-size: a sixteenth of the session table).
func TestKernelBytesAtAMillionSessions(t *testing.T) {
	const limit = 345_000_000
	out := mapBytes(t, Options{SessionTableSize: 1 << 20, EmbryoTableSize: 65536})
	var names []string
	var total int64
	for n, v := range out {
		names = append(names, n)
		total += v
	}
	sort.Slice(names, func(i, j int) bool { return out[names[i]] > out[names[j]] })
	for _, n := range names[:5] {
		t.Logf("%-16s %12d bytes", n, out[n])
	}
	t.Logf("total %d bytes (%.1f MB) in %d maps", total, float64(total)/1e6, len(out))
	if total > limit {
		t.Fatalf("maps for a million sessions take %d bytes, more than %d", total, limit)
	}
	if per := out["sessions"] / (1 << 20); per > 280 {
		t.Fatalf("session table: %d bytes an entry, want at most 280", per)
	}
}

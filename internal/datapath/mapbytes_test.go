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

func TestMapBytesReport(t *testing.T) {
	out := mapBytes(t, Options{SessionTableSize: 1 << 20, EmbryoTableSize: 65536})
	var names []string
	var total int64
	for n, v := range out {
		names = append(names, n)
		total += v
	}
	sort.Slice(names, func(i, j int) bool { return out[names[i]] > out[names[j]] })
	for _, n := range names {
		t.Logf("%-16s %12d", n, out[n])
	}
	t.Logf("total %d (%.1f MB)", total, float64(total)/1e6)
}

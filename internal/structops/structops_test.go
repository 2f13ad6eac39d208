package structops

import (
	"bytes"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// opsSpec is a struct_ops map spec whose value has a pointer, then name[16] at byte 8, then a
// trailing pointer, as tcp_congestion_ops lays its members out.
func opsSpec(value []byte, withName bool) *ebpf.MapSpec {
	members := []btf.Member{{Name: "ssthresh", Offset: 0}}
	if withName {
		members = append(members, btf.Member{Name: "name", Offset: 8 * 8})
	}
	members = append(members, btf.Member{Name: "init", Offset: 24 * 8})
	return &ebpf.MapSpec{
		Type:     ebpf.StructOpsMap,
		Value:    &btf.Struct{Name: "tcp_congestion_ops", Size: 32, Members: members},
		Contents: []ebpf.MapKV{{Key: uint32(0), Value: value}},
	}
}

func TestSetName(t *testing.T) {
	old := append(bytes.Repeat([]byte{0xaa}, 8), []byte("a-much-longer-nm")...)
	old = append(old, bytes.Repeat([]byte{0xbb}, 8)...)
	for _, c := range []struct {
		name     string
		spec     *ebpf.MapSpec
		set      string
		wantErr  bool
		wantName []byte
	}{
		{"short name, old bytes cleared", opsSpec(bytes.Clone(old), true), "hybla",
			false, append([]byte("hybla"), make([]byte, 11)...)},
		{"15 bytes, NUL kept", opsSpec(bytes.Clone(old), true), "ilnpcub12345678",
			false, append([]byte("ilnpcub12345678"), 0)},
		{"16 bytes refused", opsSpec(bytes.Clone(old), true), "ilnpcub123456789", true, nil},
		{"empty refused", opsSpec(bytes.Clone(old), true), "", true, nil},
		{"no name member", opsSpec(bytes.Clone(old), false), "hybla", true, nil},
		{"value too short", opsSpec(make([]byte, 12), true), "hybla", true, nil},
		{"not struct_ops", &ebpf.MapSpec{Type: ebpf.Array}, "hybla", true, nil},
		{"no spec", nil, "hybla", true, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := SetName(c.spec, c.set)
			if (err != nil) != c.wantErr {
				t.Fatalf("SetName(%q) err = %v, want error %v", c.set, err, c.wantErr)
			}
			if c.wantErr {
				return
			}
			v := c.spec.Contents[0].Value.([]byte)
			if !bytes.Equal(v[8:24], c.wantName) || !bytes.Equal(v[:8], old[:8]) || !bytes.Equal(v[24:], old[24:]) {
				t.Fatalf("value after SetName(%q): % x", c.set, v)
			}
		})
	}
}

package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func sample() File {
	return File{
		NID:        0x02144ffffe20ee64,
		Layout:     "v1-abcdef",
		Locals:     []Local{{Locator: 0x20010db800030000, IfIndex: 3}, {Locator: 0x20010db800020000, IfIndex: 2}},
		Formed:     []Address{{Addr: netip.MustParseAddr("2001:db8:3::214:4fff:fe20:ee64"), IfIndex: 3}},
		Identities: []netip.Addr{netip.MustParseAddr("2001:db8:2::214:4fff:fe20:ee64")},
		PeerRoutes: []netip.Addr{netip.MustParseAddr("2001:db8:1::214:4fff:fe20:cc01")},
		Peers:      []Peer{{Name: "cn", ILVs: []RankedIL{{Addr: netip.MustParseAddr("2001:db8:1::214:4fff:fe20:cc01"), Preference: 10}}}},
		Correspondents: []Correspondent{{NID: 0x02144ffffe20cc01, Acked: true,
			Advertised: []Advertised{{Locator: 0x20010db800030000}, {Locator: 0x20010db800020000, Preference: 1}}}},
	}
}

// EncodeTo writes what encoding/json writes for the whole File, so a file written entry by
// entry reads as every earlier one did.
func TestEncodeToIsJSON(t *testing.T) {
	for _, f := range []File{{NID: 1}, sample(), func() File {
		f := sample()
		f.Ephemeral = []Ephemeral{{Peer: 2, NID: 3}}
		f.EphemeralAddrs = []Address{{Addr: netip.MustParseAddr("2001:db8:3::5"), IfIndex: 3}}
		f.Peers = append(f.Peers, Peer{Name: "<a&b>", ILVs: f.Peers[0].ILVs})
		f.PeerRoutes = append(f.PeerRoutes, netip.MustParseAddr("fe80::1%eth<0>"), netip.MustParseAddr("::ffff:192.0.2.1"), netip.MustParseAddr("2001:db8::"))
		f.Correspondents = append(f.Correspondents, Correspondent{NID: 1<<64 - 1}, Correspondent{NID: 7, Acked: true,
			Advertised: []Advertised{{Locator: 1<<64 - 1, Preference: 65535}}})
		return f
	}()} {
		f.Version = Version
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := EncodeTo(&got, f); err != nil {
			t.Fatal(err)
		}
		if got.String() != string(want)+"\n" {
			t.Errorf("EncodeTo:\n%s\nencoding/json:\n%s", got.String(), want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if _, err := Read(dir); !errors.Is(err, ErrNotExist) {
		t.Fatalf("Read of an empty dir: %v, want ErrNotExist", err)
	}
	b, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	if err := Write(dir, b); err != nil {
		t.Fatal(err)
	}
	got, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := sample()
	want.Version = Version
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
	// Replaced atomically: no temporary file stays behind.
	if m, _ := filepath.Glob(filepath.Join(dir, FileName+".tmp-*")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(Path(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("state file still there after Remove: %v", err)
	}
}

func TestParseRejects(t *testing.T) {
	good, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"not JSON", "nope", "state:"},
		{"no version", `{"nid":1}`, "no version"},
		{"other version", `{"version":2,"nid":1}`, "another version: version 2, this ilnpd reads 1"},
		{"unknown field", `{"version":1,"nid":1,"extra":true}`, "unknown field"},
		{"NID 0", `{"version":1,"nid":0}`, "NID 0"},
		{"bad local", `{"version":1,"nid":1,"locals":[{"locator":0,"ifindex":1}]}`, "local locator"},
		{"IPv4 identity", `{"version":1,"nid":1,"identities":["192.0.2.1"]}`, "not IPv6"},
		{"peer without I-LV", `{"version":1,"nid":1,"peers":[{"name":"x","ilvs":[]}]}`, "no I-LV"},
		{"trailing", string(good) + "{}", "after top-level value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) = %v, want an error containing %q", tc.in, err, tc.want)
			}
		})
	}
	if _, err := Parse([]byte(`{"version":2,"nid":1}`)); !errors.Is(err, ErrVersion) {
		t.Fatalf("other version: %v, want ErrVersion", err)
	}
}

func FuzzParse(f *testing.F) {
	good, err := Encode(sample())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"version":1,"nid":1}`))
	f.Add([]byte(`{"version":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := Parse(b)
		if err != nil {
			return
		}
		// What Parse accepts encodes and parses back to the same thing.
		again, err := Encode(st)
		if err != nil {
			t.Fatalf("accepted state does not encode: %v", err)
		}
		st2, err := Parse(again)
		if err != nil {
			t.Fatalf("re-encoded state refused: %v\n%s", err, again)
		}
		// Compared encoded: a list given empty ("locals":[]) comes back absent (omitempty), the
		// same state to every reader; anything lost or changed shows in the bytes.
		again2, err := Encode(st2)
		if err != nil {
			t.Fatalf("re-parsed state does not encode: %v", err)
		}
		if !bytes.Equal(again, again2) {
			t.Fatalf("round trip changed the state:\n%s\n%s", again, again2)
		}
	})
}

// WriteChanged replaces the file only when its digest differs from the last one, and leaves
// no temporary file either way.
func TestWriteChanged(t *testing.T) {
	dir := t.TempDir()
	enc := func(f File) func(w io.Writer) error { return func(w io.Writer) error { return EncodeTo(w, f) } }
	sum, replaced, err := WriteChanged(dir, Digest{}, enc(sample()))
	if err != nil || !replaced {
		t.Fatalf("first write: replaced %v, %v", replaced, err)
	}
	b, err := os.ReadFile(Path(dir))
	if err != nil || Digest(sha256.Sum256(b)) != sum {
		t.Fatalf("digest %x is not the file's (%v)", sum, err)
	}
	if err := os.Chmod(Path(dir), 0o400); err != nil { // an unchanged file is not written again
		t.Fatal(err)
	}
	again, replaced, err := WriteChanged(dir, sum, enc(sample()))
	if err != nil || replaced || again != sum {
		t.Fatalf("same file: replaced %v, digest %x (was %x), %v", replaced, again, sum, err)
	}
	if fi, err := os.Stat(Path(dir)); err != nil || fi.Mode().Perm() != 0o400 {
		t.Fatalf("unchanged file replaced: %v %v", fi.Mode(), err)
	}
	other := sample()
	other.Layout = "v2"
	if _, replaced, err := WriteChanged(dir, sum, enc(other)); err != nil || !replaced {
		t.Fatalf("changed file: replaced %v, %v", replaced, err)
	}
	if got, err := Read(dir); err != nil || got.Layout != "v2" {
		t.Fatalf("read back layout %q, %v", got.Layout, err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, FileName+".tmp-*")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}

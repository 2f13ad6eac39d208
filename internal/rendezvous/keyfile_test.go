package rendezvous

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

const sampleKey = `key "mn-key.ilnp.test." {
	algorithm hmac-sha256;
	secret "EsRk/mvO6KlzJoLJ4X2XqIsYhb7ppYc2/1XW3EDgltg=";
};
`

func TestParseTSIGKeys(t *testing.T) {
	keys, err := ParseTSIGKeys("k", []byte(`# comment
// another
/* block
   comment */ key Second.Key { secret "c2VjcmV0"; algorithm HMAC-SHA512; };
`+sampleKey))
	if err != nil {
		t.Fatal(err)
	}
	want := []TSIGKey{
		{Name: "second.key.", Algorithm: dns.HmacSHA512, Secret: "c2VjcmV0"},
		{Name: "mn-key.ilnp.test.", Algorithm: dns.HmacSHA256, Secret: "EsRk/mvO6KlzJoLJ4X2XqIsYhb7ppYc2/1XW3EDgltg="},
	}
	if len(keys) != 2 || keys[0] != want[0] || keys[1] != want[1] {
		t.Fatalf("got %+v\nwant %+v", keys, want)
	}
}

func TestParseTSIGKeysErrors(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", "k: no key statement"},
		{"# only a comment\n", "k: no key statement"},
		{"options { };", `k:1: want a key statement, have "options"`},
		{"key \"a.\" {\n algorithm hmac-sha256;\n};", `k:3: key "a.": no secret`},
		{"key \"a.\" {\n secret \"c2VjcmV0\";\n};", `k:3: key "a.": no algorithm`},
		{"key \"a.\" {\n algorithm hmac-sha256-80;\n secret \"c2VjcmV0\"; };", `k:2: key "a.": unsupported algorithm "hmac-sha256-80"`},
		{"key \"a.\" {\n algorithm hmac-sha256;\n secret \"not base64!\"; };", `k:3: key "a.": secret is not non-empty base64`},
		{"key \"a.\" { algorithm hmac-sha256; algorithm hmac-sha1; };", `k:1: key "a.": algorithm given twice`},
		{"key \"a.\" { algorithm hmac-sha256 secret \"c2VjcmV0\"; };", `k:1: want ";", have "secret"`},
		{"key \"a.\" { algorithm hmac-sha256; secret \"c2VjcmV0\"; }", `k:1: unexpected end of file`},
		{"key \"a.\" { algorithm hmac-sha256; secret \"c2VjcmV0\"; };\n\nkey a. { algorithm hmac-sha256; secret \"c2VjcmV0\"; };", `k:3: key "a." defined twice`},
		{"key \"a.\" {\n\n secret \"c2Vj\n", `k:3: string never closed`},
		{"key /* open\n\n", `k:1: comment never closed`},
		{"key \"a.\" { bogus 1; };", `k:1: key "a.": unknown clause "bogus"`},
		{"key \"bad..name\" { };", `k:1: key name "bad..name" is not a domain name`},
		{"key \"a.\" \x01", `k:1: unexpected byte 0x01`},
		{"key \"0\xc3\x28.\" { };", `k:1: unexpected byte 0xc3 in string`},
		{"key \"a.\" {\n secret \"c2Vj\tcmV0\"; };", `k:2: unexpected byte 0x09 in string`},
	}
	for _, c := range cases {
		_, err := ParseTSIGKeys("k", []byte(c.in))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("ParseTSIGKeys(%q)\n error %v\n want  %s", c.in, err, c.want)
		}
	}
}

func TestLoadTSIGKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "k.key")
	data := sampleKey
	// The real tool's output, when installed, must parse too.
	if out, err := exec.Command("tsig-keygen", "-a", "hmac-sha256", "mn-key.ilnp.test").Output(); err == nil {
		data = string(out)
	}
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := LoadTSIGKey(path, "")
	if err != nil || k.Name != "mn-key.ilnp.test." || k.Algorithm != dns.HmacSHA256 || len(k.Secret) != 44 {
		t.Fatalf("LoadTSIGKey = %+v, %v", k, err)
	}
	if _, err := LoadTSIGKey(path, "MN-KEY.ilnp.test"); err != nil {
		t.Errorf("by name, case-insensitive: %v", err)
	}
	if _, err := LoadTSIGKey(path, "other."); err == nil || !strings.Contains(err.Error(), `no key "other."`) {
		t.Errorf("missing key: %v", err)
	}
	if _, err := LoadTSIGKey(filepath.Join(dir, "absent"), ""); err == nil {
		t.Error("missing file: no error")
	}
}

func FuzzParseTSIGKeys(f *testing.F) {
	f.Add([]byte(sampleKey))
	f.Add([]byte("key a. { algorithm hmac-sha1; secret \"c2VjcmV0\"; }; // x\n/* y */"))
	f.Add([]byte("key \"a\" {\n secret \"c2Vj\n"))
	f.Add([]byte("key /* open"))
	f.Add([]byte("key \"0\xff\xfe.\" { algorithm hmac-sha1; secret \"c2VjcmV0\"; };"))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := ParseTSIGKeys("fuzz", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz:") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, k := range keys {
			if k.Name == "" || k.Algorithm == "" || k.Secret == "" {
				t.Fatalf("incomplete key %+v", k)
			}
			if _, ok := dns.IsDomainName(k.Name); !ok || k.Name != dns.CanonicalName(k.Name) {
				t.Fatalf("key name %q not canonical", k.Name)
			}
			// Writing the key back in BIND syntax parses to the same key.
			again, err := ParseTSIGKeys("again", []byte("key \""+k.Name+"\" { algorithm "+strings.TrimSuffix(k.Algorithm, ".")+"; secret \""+k.Secret+"\"; };"))
			if err != nil || len(again) != 1 || again[0] != k {
				t.Fatalf("round trip of %+v: %+v %v", k, again, err)
			}
		}
	})
}

package rendezvous

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/miekg/dns"
)

// TSIGKey is a shared secret for signing DNS UPDATEs (RFC 8945, which obsoletes RFC 2845).
type TSIGKey struct {
	Name      string // fully qualified, lower case (RFC 8945 s.4.2 compares names canonically)
	Algorithm string // a github.com/miekg/dns algorithm name, e.g. dns.HmacSHA256
	Secret    string // base64, as in the key file and as miekg/dns wants it
}

// algorithms maps BIND's algorithm spellings to miekg/dns names. Truncated variants
// ("hmac-sha256-80") are BIND-only and are rejected by name.
var algorithms = map[string]string{
	"hmac-md5":                 dns.HmacMD5,
	"hmac-md5.sig-alg.reg.int": dns.HmacMD5,
	"hmac-sha1":                dns.HmacSHA1,
	"hmac-sha224":              dns.HmacSHA224,
	"hmac-sha256":              dns.HmacSHA256,
	"hmac-sha384":              dns.HmacSHA384,
	"hmac-sha512":              dns.HmacSHA512,
}

// LoadTSIGKey reads a BIND key file (what tsig-keygen/ddns-confgen write) and returns the key
// called name, or the only key in the file when name is empty.
func LoadTSIGKey(path, name string) (TSIGKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return TSIGKey{}, fmt.Errorf("TSIG key file: %w", err)
	}
	keys, err := ParseTSIGKeys(path, data)
	if err != nil {
		return TSIGKey{}, err
	}
	if name == "" {
		if len(keys) != 1 {
			return TSIGKey{}, fmt.Errorf("TSIG key file %s: %d keys, name the one to use", path, len(keys))
		}
		return keys[0], nil
	}
	want := dns.CanonicalName(name)
	for _, k := range keys {
		if k.Name == want {
			return k, nil
		}
	}
	return TSIGKey{}, fmt.Errorf("TSIG key file %s: no key %q", path, want)
}

// ParseTSIGKeys parses the BIND named.conf "key" statement syntax:
//
//	key "mn-key.ilnp.test." {
//		algorithm hmac-sha256;
//		secret "base64...";
//	};
//
// with #, // and /* */ comments. Only key statements are allowed. Errors name the file, the
// line and the reason; file is only used in messages.
func ParseTSIGKeys(file string, data []byte) ([]TSIGKey, error) {
	toks, err := tokenize(data)
	if err != nil {
		return nil, fmt.Errorf("%s:%w", file, err)
	}
	p := &keyParser{toks: toks, file: file}
	var keys []TSIGKey
	seen := map[string]bool{}
	for !p.eof() {
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		if seen[k.Name] {
			return nil, p.errorf(p.pos-1, "key %q defined twice", k.Name)
		}
		seen[k.Name] = true
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no key statement", file)
	}
	return keys, nil
}

type token struct {
	text   string
	quoted bool
	line   int
}

func tokenize(data []byte) ([]token, error) {
	var toks []token
	line := 1
	for i := 0; i < len(data); {
		c := data[i]
		switch {
		case c == '\n':
			line++
			i++
		case c == ' ' || c == '\t' || c == '\r':
			i++
		case c == '#' || (c == '/' && i+1 < len(data) && data[i+1] == '/'):
			for i < len(data) && data[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(data) && data[i+1] == '*':
			start := line
			i += 2
			for ; i+1 < len(data) && !(data[i] == '*' && data[i+1] == '/'); i++ {
				if data[i] == '\n' {
					line++
				}
			}
			if i+1 >= len(data) {
				return nil, fmt.Errorf("%d: comment never closed", start)
			}
			i += 2
		case c == '{' || c == '}' || c == ';':
			toks = append(toks, token{text: string(c), line: line})
			i++
		case c == '"':
			j := i + 1
			for j < len(data) && data[j] != '"' && data[j] != '\n' {
				// Key names and base64 secrets are printable ASCII; anything else would
				// make names that do not survive canonicalisation (RFC 8945 s.4.2).
				if data[j] < 0x20 || data[j] >= 0x7f {
					return nil, fmt.Errorf("%d: unexpected byte %#02x in string", line, data[j])
				}
				j++
			}
			if j >= len(data) || data[j] != '"' {
				return nil, fmt.Errorf("%d: string never closed", line)
			}
			toks = append(toks, token{text: string(data[i+1 : j]), quoted: true, line: line})
			i = j + 1
		case c < 0x20 || c >= 0x7f:
			return nil, fmt.Errorf("%d: unexpected byte %#02x", line, c)
		default:
			j := i
			for j < len(data) && !strings.ContainsRune(" \t\r\n{};\"#", rune(data[j])) && data[j] >= 0x20 && data[j] < 0x7f {
				if data[j] == '/' && j+1 < len(data) && (data[j+1] == '/' || data[j+1] == '*') {
					break
				}
				j++
			}
			toks = append(toks, token{text: string(data[i:j]), line: line})
			i = j
		}
	}
	return toks, nil
}

type keyParser struct {
	toks []token
	pos  int
	file string
}

func (p *keyParser) eof() bool { return p.pos >= len(p.toks) }

func (p *keyParser) errorf(at int, format string, args ...any) error {
	line := 0
	switch {
	case at < len(p.toks):
		line = p.toks[at].line
	case len(p.toks) > 0:
		line = p.toks[len(p.toks)-1].line
	}
	return fmt.Errorf("%s:%d: %s", p.file, line, fmt.Sprintf(format, args...))
}

var errEOF = errors.New("unexpected end of file")

func (p *keyParser) next() (token, error) {
	if p.eof() {
		return token{}, p.errorf(p.pos, "%v", errEOF)
	}
	t := p.toks[p.pos]
	p.pos++
	return t, nil
}

// expect consumes a punctuation token.
func (p *keyParser) expect(s string) error {
	t, err := p.next()
	if err != nil {
		return err
	}
	if t.quoted || t.text != s {
		return p.errorf(p.pos-1, "want %q, have %q", s, t.text)
	}
	return nil
}

// word consumes a name, quoted or not.
func (p *keyParser) word(what string) (token, error) {
	t, err := p.next()
	if err != nil {
		return t, err
	}
	if !t.quoted && (t.text == "{" || t.text == "}" || t.text == ";") {
		return t, p.errorf(p.pos-1, "want %s, have %q", what, t.text)
	}
	return t, nil
}

func (p *keyParser) key() (TSIGKey, error) {
	t, err := p.word(`"key"`)
	if err != nil {
		return TSIGKey{}, err
	}
	if t.quoted || t.text != "key" {
		return TSIGKey{}, p.errorf(p.pos-1, "want a key statement, have %q (only key statements are allowed here)", t.text)
	}
	nameTok, err := p.word("a key name")
	if err != nil {
		return TSIGKey{}, err
	}
	if _, ok := dns.IsDomainName(nameTok.text); !ok || nameTok.text == "" {
		return TSIGKey{}, p.errorf(p.pos-1, "key name %q is not a domain name", nameTok.text)
	}
	k := TSIGKey{Name: dns.CanonicalName(nameTok.text)}
	if err := p.expect("{"); err != nil {
		return TSIGKey{}, err
	}
	var haveAlg, haveSecret bool
	for {
		t, err := p.next()
		if err != nil {
			return TSIGKey{}, err
		}
		if !t.quoted && t.text == "}" {
			break
		}
		at := p.pos - 1
		switch {
		case !t.quoted && t.text == "algorithm":
			if haveAlg {
				return TSIGKey{}, p.errorf(at, "key %q: algorithm given twice", k.Name)
			}
			v, err := p.word("an algorithm name")
			if err != nil {
				return TSIGKey{}, err
			}
			alg, ok := algorithms[strings.ToLower(strings.TrimSuffix(v.text, "."))]
			if !ok {
				return TSIGKey{}, p.errorf(p.pos-1, "key %q: unsupported algorithm %q (want hmac-sha256, hmac-sha512, ...)", k.Name, v.text)
			}
			k.Algorithm, haveAlg = alg, true
		case !t.quoted && t.text == "secret":
			if haveSecret {
				return TSIGKey{}, p.errorf(at, "key %q: secret given twice", k.Name)
			}
			v, err := p.word("a base64 secret")
			if err != nil {
				return TSIGKey{}, err
			}
			raw, err := base64.StdEncoding.DecodeString(v.text)
			if err != nil || len(raw) == 0 {
				return TSIGKey{}, p.errorf(p.pos-1, "key %q: secret is not non-empty base64", k.Name)
			}
			k.Secret, haveSecret = base64.StdEncoding.EncodeToString(raw), true
		default:
			return TSIGKey{}, p.errorf(at, "key %q: unknown clause %q (want algorithm or secret)", k.Name, t.text)
		}
		if err := p.expect(";"); err != nil {
			return TSIGKey{}, err
		}
	}
	if err := p.expect(";"); err != nil {
		return TSIGKey{}, err
	}
	switch {
	case !haveAlg:
		return TSIGKey{}, p.errorf(p.pos-1, "key %q: no algorithm", k.Name)
	case !haveSecret:
		return TSIGKey{}, p.errorf(p.pos-1, "key %q: no secret", k.Name)
	}
	return k, nil
}

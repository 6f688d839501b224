package platform

import (
	"strconv"
	"strings"
	"testing"
)

// A send tag comes back from the platform (WhatsApp's
// biz_opaque_callback_data): only a tag of this gateway's sends, as
// SendTag writes it, names a receipt key.
func TestParseSendTag(t *testing.T) {
	t.Parallel()
	hash := hashKey("k")
	cases := []struct {
		tag  string
		key  string
		part int
		ok   bool
	}{
		{"whatsapp." + hash + "/0", "whatsapp." + hash, 0, true},
		{"whatsapp." + hash + "/12", "whatsapp." + hash, 12, true},
		{"telegram." + hash + "/0", "", 0, false},
		{"whatsapp." + hash, "", 0, false},
		{"whatsapp." + hash + "/", "", 0, false},
		{"whatsapp." + hash + "/-1", "", 0, false},
		{"whatsapp." + hash + "/01", "", 0, false},
		{"whatsapp." + hash + "/99999", "", 0, false},
		{"whatsapp." + strings.ToUpper(hash) + "/0", "", 0, false},
		{"whatsapp." + hash[:39] + "/0", "", 0, false},
		{"whatsapp.>/0", "", 0, false},
		{"", "", 0, false},
	}
	for _, c := range cases {
		key, part, ok := parseSendTag("whatsapp", c.tag)
		if key != c.key || part != c.part || ok != c.ok {
			t.Errorf("parseSendTag(%q) = %q, %d, %v; want %q, %d, %v", c.tag, key, part, ok, c.key, c.part, c.ok)
		}
	}
}

func FuzzParseSendTag(f *testing.F) {
	f.Add("whatsapp." + hashKey("k") + "/0")
	f.Add("whatsapp./")
	f.Fuzz(func(t *testing.T, tag string) {
		key, part, ok := parseSendTag("whatsapp", tag)
		if !ok {
			return
		}
		if key+"/"+strconv.Itoa(part) != tag || !strings.HasPrefix(key, "whatsapp.") || part < 0 {
			t.Fatalf("parseSendTag(%q) = %q, %d", tag, key, part)
		}
	})
}

package secret

import "testing"

func TestEqual(t *testing.T) {
	tests := []struct {
		name      string
		got, want string
		equal     bool
	}{
		{"same", "s3cret-key", "s3cret-key", true},
		{"different", "s3cret-kez", "s3cret-key", false},
		{"prefix", "s3cret", "s3cret-key", false},
		{"longer", "s3cret-key-and-more", "s3cret-key", false},
		{"case matters", "S3CRET-KEY", "s3cret-key", false},
		{"nothing presented", "", "s3cret-key", false},
		{"nothing configured", "", "", false},
		{"something against nothing configured", "x", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Equal(tt.got, tt.want); got != tt.equal {
				t.Errorf("Equal(%q, %q) = %v, want %v", tt.got, tt.want, got, tt.equal)
			}
		})
	}
}

package memorygate_test

import (
	"os"
	"testing"

	"github.com/switchboard-chat/switchboard/pkg/pg/pgtest"
)

// TestMain reuses the tests' migrated schemas (pgtest.Main).
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

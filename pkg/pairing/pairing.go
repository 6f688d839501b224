// Package pairing lets an operator admit unknown users: a user who is not on
// an allowlist gets a short code in a DM, and an operator approves the code.
// Codes are stored only as salted hashes in Postgres, so every router
// replica and the admin API see the same state.
//
// Rules (as in the Hermes gateway): 8 characters from an alphabet without
// look-alikes, valid one hour, at most one new code per user per ten
// minutes, at most three pending codes per platform, and five failed
// approvals lock approvals on that platform for an hour.
package pairing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Alphabet is the code alphabet: no 0/O, 1/I.
const Alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"

// CodeLength is the number of characters in a code.
const CodeLength = 8

// Limits of the pairing rules.
const (
	CodeTTL         = time.Hour
	UserRateWindow  = 10 * time.Minute
	MaxPending      = 3
	MaxFailures     = 5
	LockoutDuration = time.Hour
)

// Errors returned by Store.
var (
	ErrRateLimited  = errors.New("pairing: a code was issued to this user recently")
	ErrTooManyCodes = errors.New("pairing: too many pending codes on this platform")
	ErrLockedOut    = errors.New("pairing: approvals on this platform are locked after failed attempts")
	ErrInvalidCode  = errors.New("pairing: no pending code matches")
	// ErrIssuedAlready: a code was issued and sent for this very event
	// by an earlier handling of it (a redelivery after a crash before the
	// event was acknowledged); nothing new is to be sent.
	ErrIssuedAlready = errors.New("pairing: a code was issued for this event already")
)

// Pairing is one code or approval, as the admin API lists it.
type Pairing struct {
	Platform   string
	UserID     string
	UserName   string
	State      string // pending or approved
	CreatedAt  time.Time
	ExpiresAt  time.Time
	ApprovedAt time.Time
}

// Store keeps pairing state in Postgres.
type Store struct {
	db  *pgxpool.Pool
	now func() time.Time
}

// NewStore returns a Store on db.
func NewStore(db *pgxpool.Pool) *Store { return &Store{db: db, now: time.Now} }

// WithClock returns a copy of s that reads the time from now (tests).
func (s *Store) WithClock(now func() time.Time) *Store {
	c := *s
	c.now = now
	return &c
}

// NewCode draws a random code.
func NewCode() string {
	b := make([]byte, CodeLength)
	_, _ = rand.Read(b)
	for i := range b {
		// 256 is a multiple of 32: no modulo bias.
		b[i] = Alphabet[int(b[i])%len(Alphabet)]
	}
	return string(b)
}

// Normalize uppercases a typed code and drops spaces and dashes.
func Normalize(code string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '-', '\t':
			return -1
		}
		return r
	}, strings.ToUpper(strings.TrimSpace(code)))
}

func hashCode(salt []byte, code string) []byte {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(code))
	return h.Sum(nil)
}

// lockPlatform serialises pairing changes of one platform across replicas.
func lockPlatform(ctx context.Context, tx pgx.Tx, platform string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('pairing:' || $1, 0))`, platform); err != nil {
		return fmt.Errorf("lock pairing %s: %w", platform, err)
	}
	return nil
}

// UserID is the form of a user id that pairing stores and compares. On
// WhatsApp, as in Hermes, a number is one user however it is written: one
// leading "+" is dropped and the id is cut at the first ":" (a device) and
// "@" (the server), so "+15551234567", "15551234567@s.whatsapp.net" and
// "15551234567:12@s.whatsapp.net" are the same user. Other ids are kept.
func UserID(platform, id string) string {
	id = strings.TrimSpace(id)
	if !strings.EqualFold(platform, "whatsapp") {
		return id
	}
	c := strings.TrimPrefix(id, "+")
	if i := strings.IndexAny(c, ":@"); i >= 0 {
		c = c[:i]
	}
	if c == "" {
		return id
	}
	return c
}

// ids are the forms of userID a stored row may hold: the canonical one,
// and the id as given (rows stored before ids were canonical).
func ids(platform, userID string) []string {
	if c := UserID(platform, userID); c != userID {
		return []string{c, userID}
	}
	return []string{userID}
}

// IsApproved reports whether an operator approved the user.
func (s *Store) IsApproved(ctx context.Context, platform, userID string) (bool, error) {
	var one int
	err := s.db.QueryRow(ctx, `SELECT 1 FROM pairing_approved WHERE platform = $1 AND user_id = ANY($2) LIMIT 1`, platform, ids(platform, userID)).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read pairing approval: %w", err)
	}
	return true, nil
}

// Issue creates a code for the user, or says why not (ErrRateLimited,
// ErrTooManyCodes, ErrLockedOut). The code is returned once and never
// stored. A caller that hands the code on in a way that can fail (a
// message to the user) uses IssueSent instead, or a failure loses it.
func (s *Store) Issue(ctx context.Context, platform, userID, userName string) (string, error) {
	var code string
	err := s.IssueSent(ctx, platform, userID, userName, "", func(_ context.Context, c string, _ int64) error {
		code = c
		return nil
	})
	return code, err
}

// IssueSent creates a code for the user and hands it to send (with the
// pending code's id, unique to this attempt), inside the transaction
// that stores it: the code counts (as pending, and against the user's
// rate limit and the platform's pending cap) only once send returned
// nil, which for the router means the message carrying it is on the
// bus. When send fails nothing is kept, and the user's next message (or
// the redelivery of this one) gets a new code at once.
//
// Hermes's generate_code stores the code before its caller sends it: a
// failed send leaves a code nobody received and the user rate limited
// for ten minutes, with no way to send it again (only its hash is
// kept). Switchboard keeps the hash-only storage, the one-hour expiry,
// the limits and the lockout, and commits only after the send instead.
// The platform's pairing lock is held during send: send should be
// bounded (a bus publish is).
//
// eventID names the inbound event the code answers ("" for none); it is
// kept with the code. When a code of this user was issued for the same
// event already, IssueSent returns ErrIssuedAlready and sends nothing:
// the event was redelivered after its code was committed (and so its
// notice published) but before it was acknowledged, and the user must
// get neither a second code nor the rate limit's "a code was sent to you
// recently" for their own. Hermes has no such case: its adapters hand
// a message to the gateway once, with no redelivery.
func (s *Store) IssueSent(ctx context.Context, platform, userID, userName, eventID string, send func(ctx context.Context, code string, id int64) error) error {
	now := s.now()
	userID = UserID(platform, userID)
	return pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := lockPlatform(ctx, tx, platform); err != nil {
			return err
		}
		if eventID != "" {
			var issued bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pairing_codes WHERE platform = $1 AND user_id = $2 AND event_id = $3)`,
				platform, userID, eventID).Scan(&issued); err != nil {
				return fmt.Errorf("look up the event's pairing code: %w", err)
			}
			if issued {
				return ErrIssuedAlready
			}
		}
		if locked, err := lockedOut(ctx, tx, platform, now); err != nil {
			return err
		} else if locked {
			return ErrLockedOut
		}
		var recent int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pairing_codes WHERE platform = $1 AND user_id = $2 AND created_at > $3`,
			platform, userID, now.Add(-UserRateWindow)).Scan(&recent); err != nil {
			return fmt.Errorf("count recent codes: %w", err)
		}
		if recent > 0 {
			return ErrRateLimited
		}
		var pending int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM pairing_codes WHERE platform = $1 AND state = 'pending' AND expires_at > $2`,
			platform, now).Scan(&pending); err != nil {
			return fmt.Errorf("count pending codes: %w", err)
		}
		if pending >= MaxPending {
			return ErrTooManyCodes
		}
		code := NewCode()
		salt := make([]byte, 16)
		_, _ = rand.Read(salt)
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO pairing_codes (platform, user_id, user_name, salt, code_hash, created_at, expires_at, event_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id`, platform, userID, userName, salt, hashCode(salt, code), now, now.Add(CodeTTL), eventID).Scan(&id); err != nil {
			return fmt.Errorf("store pairing code: %w", err)
		}
		// Old rows only serve the rate limit; keep the table small.
		if _, err := tx.Exec(ctx, `DELETE FROM pairing_codes WHERE platform = $1 AND state <> 'approved' AND expires_at < $2`,
			platform, now.Add(-24*time.Hour)); err != nil {
			return fmt.Errorf("prune pairing codes: %w", err)
		}
		if err := send(ctx, code, id); err != nil {
			return fmt.Errorf("send pairing code: %w", err)
		}
		return nil
	})
}

func lockedOut(ctx context.Context, tx pgx.Tx, platform string, now time.Time) (bool, error) {
	var until *time.Time
	err := tx.QueryRow(ctx, `SELECT locked_until FROM pairing_lockouts WHERE platform = $1`, platform).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read pairing lockout: %w", err)
	}
	return until != nil && until.After(now), nil
}

// Approve admits the user whose pending code matches. A wrong code counts
// as a failure; the fifth failure locks approvals on the platform for
// LockoutDuration. by names the operator (for the record).
func (s *Store) Approve(ctx context.Context, platform, code, by string) (Pairing, error) {
	now := s.now()
	code = Normalize(code)
	var p Pairing
	var failed bool
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := lockPlatform(ctx, tx, platform); err != nil {
			return err
		}
		if locked, err := lockedOut(ctx, tx, platform, now); err != nil {
			return err
		} else if locked {
			return ErrLockedOut
		}
		rows, err := tx.Query(ctx, `SELECT id, user_id, user_name, salt, code_hash, created_at, expires_at
			FROM pairing_codes WHERE platform = $1 AND state = 'pending' AND expires_at > $2`, platform, now)
		if err != nil {
			return fmt.Errorf("read pending codes: %w", err)
		}
		var matchID int64 = -1
		for rows.Next() {
			var id int64
			var salt, hash []byte
			var c Pairing
			if err := rows.Scan(&id, &c.UserID, &c.UserName, &salt, &hash, &c.CreatedAt, &c.ExpiresAt); err != nil {
				rows.Close()
				return fmt.Errorf("scan pending code: %w", err)
			}
			// Compare every row in constant time; no early exit.
			if subtle.ConstantTimeCompare(hashCode(salt, code), hash) == 1 {
				matchID, p = id, c
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read pending codes: %w", err)
		}
		if matchID < 0 || len(code) != CodeLength {
			failed = true
			_, err := tx.Exec(ctx, `INSERT INTO pairing_lockouts (platform, failures) VALUES ($1, 1)
				ON CONFLICT (platform) DO UPDATE SET failures = pairing_lockouts.failures + 1`, platform)
			if err != nil {
				return fmt.Errorf("count failed approval: %w", err)
			}
			_, err = tx.Exec(ctx, `UPDATE pairing_lockouts SET locked_until = $2, failures = 0
				WHERE platform = $1 AND failures >= $3`, platform, now.Add(LockoutDuration), MaxFailures)
			if err != nil {
				return fmt.Errorf("lock pairing: %w", err)
			}
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE pairing_codes SET state = 'approved' WHERE id = $1`, matchID); err != nil {
			return fmt.Errorf("mark code approved: %w", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO pairing_approved (platform, user_id, user_name, created_at, approved_at, approved_by)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (platform, user_id) DO UPDATE SET user_name = EXCLUDED.user_name, approved_at = EXCLUDED.approved_at, approved_by = EXCLUDED.approved_by`,
			platform, p.UserID, p.UserName, p.CreatedAt, now, by); err != nil {
			return fmt.Errorf("store approval: %w", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE pairing_lockouts SET failures = 0 WHERE platform = $1`, platform); err != nil {
			return fmt.Errorf("reset pairing failures: %w", err)
		}
		p.Platform, p.State, p.ApprovedAt = platform, "approved", now
		return nil
	})
	if err != nil {
		return Pairing{}, err
	}
	if failed {
		return Pairing{}, ErrInvalidCode
	}
	return p, nil
}

// Revoke removes an approval; it reports whether there was one.
func (s *Store) Revoke(ctx context.Context, platform, userID string) (bool, error) {
	tag, err := s.db.Exec(ctx, `DELETE FROM pairing_approved WHERE platform = $1 AND user_id = ANY($2)`, platform, ids(platform, userID))
	if err != nil {
		return false, fmt.Errorf("revoke pairing: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// List returns pending (unexpired) codes and approvals, optionally of one
// platform.
func (s *Store) List(ctx context.Context, platform string) ([]Pairing, error) {
	rows, err := s.db.Query(ctx, `
		SELECT platform, user_id, user_name, 'pending', created_at, expires_at, NULL::timestamptz
		  FROM pairing_codes WHERE state = 'pending' AND expires_at > $2 AND ($1 = '' OR platform = $1)
		UNION ALL
		SELECT platform, user_id, user_name, 'approved', created_at, NULL::timestamptz, approved_at
		  FROM pairing_approved WHERE ($1 = '' OR platform = $1)
		ORDER BY 1, 4 DESC, 5`, platform, s.now())
	if err != nil {
		return nil, fmt.Errorf("list pairings: %w", err)
	}
	defer rows.Close()
	var out []Pairing
	for rows.Next() {
		var p Pairing
		var exp, appr *time.Time
		if err := rows.Scan(&p.Platform, &p.UserID, &p.UserName, &p.State, &p.CreatedAt, &exp, &appr); err != nil {
			return nil, fmt.Errorf("scan pairing: %w", err)
		}
		if exp != nil {
			p.ExpiresAt = *exp
		}
		if appr != nil {
			p.ApprovedAt = *appr
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

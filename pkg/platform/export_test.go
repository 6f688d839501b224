package platform

// SetReceiptStoreHook runs f before each store in r's receipts bucket
// (a receipt or a part record): its error fails the store, as NATS
// unavailable at that moment would.
func SetReceiptStoreHook(r *Runner, f func() error) {
	r.storeHook.Store(&f)
}

// MaxHeldReceipts bounds the entries a replica holds.
const MaxHeldReceipts = maxHeldReceipts

// ReceiptKey is r's key in the receipts bucket of a send's idempotency
// key.
func ReceiptKey(r *Runner, idempotencyKey string) string {
	return r.name + "." + hashKey(idempotencyKey)
}

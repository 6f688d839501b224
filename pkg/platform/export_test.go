package platform

// SetReceiptStoreHook runs f before each store of r's receipts: its
// error fails the store, as NATS unavailable at that moment would.
func SetReceiptStoreHook(r *Runner, f func() error) {
	r.storeHook.Store(&f)
}

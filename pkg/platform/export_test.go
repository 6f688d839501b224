package platform

// SetReceiptStoreHook runs f before each store in r's receipts bucket
// (a receipt or a part record): its error fails the store, as NATS
// unavailable at that moment would.
func SetReceiptStoreHook(r *Runner, f func() error) {
	r.storeHook.Store(&f)
}

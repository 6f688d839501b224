package outbox

// NextTakeoverSQL is the read ClaimNext adds to its claim, for the test
// of its plan.
const NextTakeoverSQL = nextTakeoverSQL

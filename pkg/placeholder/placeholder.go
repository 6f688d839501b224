// Package placeholder holds the texts that stand in for an agent's
// answer when it has none to give, shared by the worker (which ends a
// turn with one) and delivery (which sends one for a final text that is
// empty), so that both say the same.
package placeholder

// NoResponse is Hermes's answer of a turn whose final response is empty
// (gateway/run.py, _run_agent): the worker's when the model said nothing,
// delivery's for a final text that is empty or blank. Hermes tests the
// response for emptiness only (a blank one goes to the platform as is);
// delivery counts blank as empty, since no platform takes a blank
// message.
const NoResponse = "(No response generated)"

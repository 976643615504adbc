package fleetrow

// AnyTokenSQL reads whether the ledger holds a token, revoked or not: a
// ledger with none has no way in but a bootstrap token.
const AnyTokenSQL = `SELECT EXISTS (SELECT 1 FROM tokens)`

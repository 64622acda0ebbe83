/// Which signers a verification accepts.
///
/// Today: a set of trusted public keys, any one of which may have signed (key rotation works by
/// trusting the old and the new key at once). Pins, revocation, certificate chains and channels
/// extend this value without changing the APIs that take it.
public struct TrustPolicy: Sendable {
    /// The trusted keys, in the order given.
    public private(set) var keys: [PublicKey]

    /// Trusts exactly these keys. Duplicates (same key id) are kept once.
    public init(keys: [PublicKey]) {
        var seen = Set<KeyID>()
        self.keys = keys.filter { seen.insert($0.keyID).inserted }
    }

    /// Loads each file with ``PublicKey/init(contentsOf:allowWeakKey:)`` and trusts them all.
    public init(publicKeyFiles paths: [String], allowWeakKeys: Bool = false) throws {
        try self.init(keys: paths.map { try PublicKey(contentsOf: $0, allowWeakKey: allowWeakKeys) })
    }

    /// The trusted key with this id, if any.
    public func key(withID id: KeyID) -> PublicKey? {
        keys.first { $0.keyID == id }
    }
}

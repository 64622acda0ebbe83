public import SystemPackage
import Foundation
import SignetCore

/// Which signers a verification accepts. There is always a policy: Signet has no "trust anyone".
///
/// Sources combine: keys given directly, keys and certificates in trust directories (a
/// subdirectory's name is a channel: `trust/release/`, `trust/beta/`), and certificate
/// authorities whose chains vouch for a package's signer certificate. Restrictions apply on top:
/// pins (only pinned keys), revocations, a required channel. Key rotation works by trusting the
/// old and the new key at once; reports name the key that matched.
public struct TrustPolicy: Sendable {
    /// The trusted keys, in the order given (duplicates by key id kept once).
    public package(set) var keys: [PublicKey]
    /// The channel each trust-directory key came from.
    public private(set) var channels: [KeyID: String] = [:]
    /// When not empty, only these keys are accepted (hex key ids or `sha256//` pins).
    public var pins: Set<KeyID> = []
    /// Keys that are never accepted.
    public var revoked: Set<KeyID> = []
    /// When set, the signer's key must come from this channel's folder of a trust directory.
    public var requiredChannel: String?
    /// Root certificates (DER). When given, a package's signer certificate that chains to one of
    /// them (with the package's intermediates) vouches for the signer's key.
    public var certificateAuthorities: [[UInt8]] = []
    /// Accept certificate chains whose certificates have expired (device keys outlive certificates).
    public var allowExpiredCertificates = false
    /// When set, the signer certificate's subject must contain these RDNs ("CN=Release signer").
    public var expectedSubject: String?

    /// Whether `subject` is a list of RDNs `expectedSubject` can hold: comma-separated
    /// `TYPE=VALUE` pairs, TYPE an attribute name or dotted OID (`CN`, `O`, `2.5.4.3`), VALUE not
    /// empty ("CN=Release signer, O=Example").
    public static func isValidSubject(_ subject: String) -> Bool {
        let parts = subject.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        return !parts.isEmpty
            && parts.allSatisfy { part in
                guard let equals = part.firstIndex(of: "=") else { return false }
                let type = part[..<equals], value = part[part.index(after: equals)...]
                return !type.isEmpty && !value.trimmingCharacters(in: .whitespaces).isEmpty
                    && type.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == ".") }
            }
    }
    /// Tolerance for `expires`, in seconds.
    public var clockSkew: Int64 = 300

    /// Trusts exactly these keys. Duplicates (same key id) are kept once.
    public init(keys: [PublicKey]) {
        var seen = Set<KeyID>()
        self.keys = keys.filter { seen.insert($0.keyID).inserted }
    }

    /// Loads each file with ``PublicKey/init(contentsOf:allowWeakKey:)-(String,_)`` and trusts them all.
    public init(publicKeyFiles paths: [String], allowWeakKeys: Bool = false) throws {
        try self.init(keys: paths.map { try PublicKey(contentsOf: $0, allowWeakKey: allowWeakKeys) })
    }

    /// Adds every key and certificate in a trust directory; files in a subdirectory belong to
    /// the channel named after it. A sealed directory (`.signet-trust`) must match its seal; with
    /// `sealKeys`, it must be sealed and the seal signed by one of them.
    public mutating func addTrustDirectory(
        _ directory: String, allowWeakKeys: Bool = false, salt: [UInt8]? = nil,
        sealKeys: [PublicKey] = []
    ) throws {
        try TrustStoreSeal.check(directory, salt: salt, sealKeys: sealKeys)
        for (path, channel) in try TrustStoreSeal.files(in: directory) {
            let key = try PublicKey(contentsOf: directory + "/" + path, allowWeakKey: allowWeakKeys)
            if !keys.contains(where: { $0.keyID == key.keyID }) { keys.append(key) }
            tufOnlyKeys.remove(key.keyID)
            if let channel { channels[key.keyID] = channel }
        }
    }

    /// The policy for a raw signature over a file (`signet verify`): keys trusted only through
    /// TUF metadata vouch for the packages their roles list, never for a raw signature alone.
    public var forRawSignatures: TrustPolicy {
        var raw = self
        raw.keys.removeAll { tufOnlyKeys.contains($0.keyID) }
        raw.tufOnlyKeys = []
        raw.tufListings = []
        return raw
    }

    /// A package that TUF metadata lists (`addTUFMetadata(_:)`, which the TUF layer adds).
    package struct TUFListed: Sendable {
        package let name: String
        package let sequence: UInt64
        package let manifestSHA256: String
        package let keyIDs: Set<KeyID>
        package let role: String
        package let threshold: Int
        package let roleKeys: Int
        /// Its rollout was halted by the publisher (FORMAT §7): vouched for by no path.
        package var halted = false

        package init(name: String, sequence: UInt64, manifestSHA256: String, keyIDs: Set<KeyID>, role: String, threshold: Int, roleKeys: Int) {
            (self.name, self.sequence, self.manifestSHA256, self.keyIDs) = (name, sequence, manifestSHA256, keyIDs)
            (self.role, self.threshold, self.roleKeys) = (role, threshold, roleKeys)
        }
    }
    /// What the TUF metadata lists, and the keys trusted only through it (kept here, filled
    /// and read by the TUF layer's extension).
    package var tufListings: [TUFListed] = []
    /// Accept a package whose TUF listing says its rollout was halted (`--allow-halted-release`:
    /// dangerous — the publisher stopped it for a reason). False: refused as `update` refuses it.
    public var allowHaltedReleases = false
    package var tufOnlyKeys: Set<KeyID> = []
    package var tufSource: String?

    /// Reads a revocation list: key ids (hex or `sha256//`), one a line, `#` starts a comment.
    public mutating func addRevocations(from path: String) throws {
        let text = String(decoding: try readSmallFile(path, what: "revocation list", limit: 16 << 20), as: UTF8.self)
        for (number, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
            if line.isEmpty { continue }
            guard let id = KeyID(line) else {
                throw SignetError(
                    .malformedInput, "line \(number + 1) of revocation list '\(path)' is not a key id (64 hex characters or sha256//BASE64): '\(line)'",
                    path: path)
            }
            revoked.insert(id)
        }
    }

    /// The trusted key with this id, if any (whether or not the restrictions accept it).
    public func key(withID id: KeyID) -> PublicKey? {
        keys.first { $0.keyID == id }
    }

    /// Why this key may not sign under the policy, or nil when it may.
    public func refusal(for id: KeyID, fromCertificate: Bool = false) -> String? {
        if revoked.contains(id) { return "key \(id.short) is revoked" }
        if !pins.isEmpty, !pins.contains(id) { return "key \(id.short) is not pinned (pinned: \(pins.map(\.short).sorted().joined(separator: ", ")))" }
        if let requiredChannel {
            guard let channel = channels[id] else {
                return fromCertificate
                    ? "key \(id.short) comes from a certificate, not from the '\(requiredChannel)' channel"
                    : "key \(id.short) is not in the '\(requiredChannel)' channel"
            }
            if channel != requiredChannel { return "key \(id.short) is in the '\(channel)' channel, not '\(requiredChannel)'" }
        }
        if !fromCertificate, key(withID: id) == nil { return "key \(id.short) is not among the trusted keys" }
        return nil
    }

    /// The keys the restrictions accept.
    public var acceptedKeys: [PublicKey] { keys.filter { refusal(for: $0.keyID) == nil } }

    /// The channel of a key, if it came from a trust directory's channel folder.
    public func channel(of id: KeyID) -> String? { channels[id] }

    /// The policy for one package or installed tree: its signer certificate, if it chains to a
    /// trusted root and meets the certificate rules, adds its key. Returns the policy to verify
    /// with (accepted keys only) and, when a certificate was refused, why.
    package func resolved(signerCertificate: [UInt8]?, chain: [[UInt8]]) -> (TrustPolicy, certificateRefusal: String?) {
        var accepted = TrustPolicy(keys: acceptedKeys)
        accepted.channels = channels
        accepted.tufListings = tufListings
        accepted.allowHaltedReleases = allowHaltedReleases
        accepted.tufOnlyKeys = tufOnlyKeys
        accepted.tufSource = tufSource
        guard !certificateAuthorities.isEmpty else { return (accepted, nil) }
        guard let signerCertificate else {
            return (accepted, "the package carries no signer certificate (.signet/certs/signer.der), but certificate authorities are required")
        }
        switch CertificateChain.validate(
            leaf: signerCertificate, intermediates: chain, roots: certificateAuthorities,
            allowExpired: allowExpiredCertificates, expectedSubject: expectedSubject)
        {
        case .failure(let refusal):
            return (accepted, refusal.reason)
        case .success(let key):
            if let refusal = refusal(for: key.keyID, fromCertificate: true) { return (accepted, refusal) }
            if !accepted.keys.contains(where: { $0.keyID == key.keyID }) { accepted.keys.append(key) }
            return (accepted, nil)
        }
    }
}

// MARK: Swift-native forms: FilePath and URL paths, DataProtocol bytes

extension TrustPolicy {
    /// Trusts the keys in these files.
    @_disfavoredOverload
    public init(publicKeyFiles paths: [FilePath], allowWeakKeys: Bool = false) throws {
        try self.init(publicKeyFiles: paths.map(\.string), allowWeakKeys: allowWeakKeys)
    }

    /// Adds the keys of a trust directory, checked against its seal first.
    public mutating func addTrustDirectory(
        _ directory: FilePath, allowWeakKeys: Bool = false, salt: [UInt8]? = nil,
        sealKeys: [PublicKey] = []
    ) throws {
        try addTrustDirectory(directory.string, allowWeakKeys: allowWeakKeys, salt: salt, sealKeys: sealKeys)
    }
}

import SignetCore
import SignetCrypto
/// One TUF metadata file (TUF specification 1.0, §4): the `signed` document kept whole (its
/// canonical form is what the signatures cover, unknown fields included), its signatures, and
/// the fields every role has. Parsing checks the shape only; whose signatures count is decided
/// by the delegating role (``TUFTrustedSet``).
package struct TUFMetadata: Sendable {
    /// The TUF specification's major version Signet implements.
    static let specificationMajor = "1"

    /// The four top-level roles.
    package static let topLevelRoles: Set<String> = ["root", "timestamp", "snapshot", "targets"]

    let signed: TUFJSON
    /// The canonical JSON of `signed`: the bytes each signature is over.
    package let signedBytes: [UInt8]
    /// Key id → signature bytes (nil when the hex does not decode: it verifies nothing).
    package let signatures: [String: [UInt8]?]
    let type: String
    package let version: Int64
    package let expires: Timestamp

    static func malformed(_ reason: String) -> SignetError {
        SignetError(.malformedMetadata, reason)
    }

    /// Parses metadata of the role type `expectedType` (`root`, `timestamp`, `snapshot`, `targets`).
    package init(bytes: [UInt8], expectedType: String, name: String) throws {
        let json: TUFJSON
        do {
            json = try TUFJSON.parse(bytes)
        } catch {
            throw SignetError(.malformedMetadata, "\(name) is not strict JSON: \(error)", path: name)
        }
        guard let signed = json["signed"], case .object = signed, let signatureList = json["signatures"]?.arrayItems else {
            throw SignetError(.malformedMetadata, "\(name) has no 'signed' object and 'signatures' list", path: name)
        }
        var signatures: [String: [UInt8]?] = [:]
        for entry in signatureList {
            guard let keyID = entry["keyid"]?.stringValue, let hex = entry["sig"]?.stringValue else {
                throw SignetError(.malformedMetadata, "\(name) has a signature without a string 'keyid' and 'sig'", path: name)
            }
            // §4.2: a key id appears once in "signatures"; a repeated one could be counted twice.
            guard signatures[keyID] == nil else {
                throw SignetError(.malformedMetadata, "\(name) has two signatures by key \(keyID.prefix(16)); the specification allows one per key", path: name)
            }
            signatures[keyID] = .some([UInt8](hex: hex))
        }
        guard let type = signed["_type"]?.stringValue else {
            throw SignetError(.malformedMetadata, "\(name) has no '_type'", path: name)
        }
        guard type == expectedType else {
            throw SignetError(.malformedMetadata, "\(name) is '\(type)' metadata where '\(expectedType)' was expected", path: name)
        }
        guard let spec = signed["spec_version"]?.stringValue else {
            throw SignetError(.malformedMetadata, "\(name) has no 'spec_version'", path: name)
        }
        let parts = spec.split(separator: ".", omittingEmptySubsequences: false)
        guard (2...3).contains(parts.count), parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }) else {
            throw SignetError(.malformedMetadata, "\(name) has spec_version '\(spec)', not MAJOR.MINOR[.PATCH]", path: name)
        }
        guard parts[0] == Substring(Self.specificationMajor) else {
            throw SignetError(
                .malformedMetadata, "\(name) is for TUF specification \(spec); Signet implements version \(Self.specificationMajor).x", path: name)
        }
        guard let version = signed["version"]?.integerValue, version > 0 else {
            throw SignetError(.malformedMetadata, "\(name) has no positive integer 'version' (at most 2^63-1)", path: name)
        }
        guard let expiresText = signed["expires"]?.stringValue, let expires = Timestamp(rfc3339: expiresText) else {
            throw SignetError(.malformedMetadata, "\(name) has no 'expires' of the form YYYY-MM-DDTHH:MM:SSZ", path: name)
        }
        self.signed = signed
        self.signedBytes = signed.canonical
        self.signatures = signatures
        self.type = type
        self.version = version
        self.expires = expires
    }

    /// True when `now` is at or after `expires` (as python-tuf and the specification count it).
    func isExpired(at now: Timestamp) -> Bool { now >= expires }
}

/// A role's keys and threshold, as a delegating role states them.
package struct TUFRole: Sendable {
    package let keyIDs: [String]
    package let threshold: Int

    init(json: TUFJSON, name: String) throws {
        guard let ids = json["keyids"]?.arrayItems else { throw TUFMetadata.malformed("role '\(name)' has no 'keyids' list") }
        var keyIDs: [String] = []
        for id in ids {
            guard let text = id.stringValue else { throw TUFMetadata.malformed("role '\(name)' has a key id that is not a string") }
            // Listed twice, one key could meet a threshold of two.
            guard !keyIDs.contains(text) else { throw TUFMetadata.malformed("role '\(name)' lists key \(text.prefix(16)) twice") }
            keyIDs.append(text)
        }
        guard let threshold = json["threshold"]?.integerValue, threshold >= 1, threshold <= Int64(Int32.max) else {
            throw TUFMetadata.malformed("role '\(name)' has no threshold of at least 1")
        }
        self.keyIDs = keyIDs
        self.threshold = Int(threshold)
    }
}

/// Keys by id, as `root` and `delegations` state them.
func tufKeys(_ json: TUFJSON?, what: String) throws -> [String: TUFKey] {
    guard let members = json?.objectMembers else { throw TUFMetadata.malformed("\(what) has no 'keys' object") }
    var keys: [String: TUFKey] = [:]
    for (id, value) in members { keys[id] = try TUFKey(json: value) }
    return keys
}

/// The version, length and hashes of a metadata file (`meta` of timestamp and snapshot).
package struct TUFMetaFile: Sendable, Equatable {
    package let version: Int64
    package let length: Int64?
    package let hashes: [String: String]?
    /// Signet's own field (TUF allows added ones): when the snapshot first named this version
    /// of a targets role, from which the rollout plans it carries that count from their
    /// publication count (FORMAT.md §7, "Rollouts"). Nil where the snapshot states none.
    package let published: Timestamp?

    /// The field ``published`` is read from.
    package static let publishedField = "signet_published"

    init(json: TUFJSON, name: String) throws {
        guard let version = json["version"]?.integerValue, version > 0 else {
            throw TUFMetadata.malformed("meta '\(name)' has no positive 'version'")
        }
        self.version = version
        if let value = json["length"] {
            guard let length = value.integerValue, length >= 0 else {
                throw TUFMetadata.malformed("meta '\(name)' has a 'length' that is not a non-negative integer")
            }
            self.length = length
        } else {
            length = nil
        }
        if let value = json["hashes"] {
            hashes = try tufHashes(value, what: "meta '\(name)'")
        } else {
            hashes = nil
        }
        if let value = json[Self.publishedField] {
            guard let text = value.stringValue, let at = Timestamp(rfc3339: text) else {
                throw TUFMetadata.malformed("meta '\(name)' has a '\(Self.publishedField)' that is not an RFC 3339 time")
            }
            published = at
        } else {
            published = nil
        }
    }
}

/// A `hashes` object: algorithm → lowercase hex; at least one.
func tufHashes(_ json: TUFJSON, what: String) throws -> [String: String] {
    guard let members = json.objectMembers, !members.isEmpty else { throw TUFMetadata.malformed("\(what) has an empty or invalid 'hashes'") }
    var hashes: [String: String] = [:]
    for (algorithm, value) in members {
        guard let hex = value.stringValue else { throw TUFMetadata.malformed("\(what) has a hash that is not a string") }
        hashes[algorithm] = hex
    }
    return hashes
}

/// Checks bytes against a stated length and hashes (every hash stated must match; an algorithm
/// Signet does not compute refuses the file rather than skipping the check).
func tufCheck(_ bytes: [UInt8], length: Int64?, hashes: [String: String]?, name: String) throws {
    if let length, Int64(bytes.count) != length {
        throw SignetError(.metadataMismatch, "\(name) is \(bytes.count) bytes; the trusted metadata says \(length)", path: name)
    }
    for (algorithm, expected) in (hashes ?? [:]).sorted(by: { $0.key < $1.key }) {
        guard let digestAlgorithm = tufDigestAlgorithm(algorithm) else {
            throw SignetError(
                .metadataMismatch, "\(name) is bound by a '\(algorithm)' hash, which Signet does not compute (sha256, sha384, sha512)", path: name)
        }
        let digest = try Digest.compute(bytes, algorithm: digestAlgorithm)
        guard digest.hex == expected.lowercased() else {
            throw SignetError(
                .metadataMismatch, "\(name) does not have the \(algorithm) hash the trusted metadata gives: modified, or another version", path: name)
        }
    }
}

func tufDigestAlgorithm(_ name: String) -> DigestAlgorithm? {
    switch name {
    case "sha256": return .sha256
    case "sha384": return .sha384
    case "sha512": return .sha512
    default: return nil
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto

/// Something that delegates trust: `root` (to the top-level roles) or a `targets` role (to its
/// delegated roles). It names the keys and threshold of each role it delegates to.
package protocol TUFDelegator: Sendable {
    /// The keys and threshold of `role`, or nil when this delegator does not delegate to it.
    func delegation(to role: String) -> (keys: [String: TUFKey], role: TUFRole)?
}

extension TUFDelegator {
    /// Verifies `metadata` as `role`: at least the threshold of the role's distinct keys must
    /// have valid signatures over the canonical `signed`. Throws `.thresholdNotMet` otherwise.
    package func verify(_ metadata: TUFMetadata, as role: String, name: String) throws {
        guard let (keys, delegated) = delegation(to: role) else {
            throw SignetError(.thresholdNotMet, "\(name): no trusted role delegates to '\(role)'", path: name)
        }
        var valid: Set<String> = []
        for id in delegated.keyIDs {
            guard let key = keys[id], let signature = metadata.signatures[id] ?? nil else { continue }
            if key.verifies(signature, over: metadata.signedBytes) { valid.insert(id) }
        }
        guard valid.count >= delegated.threshold else {
            throw SignetError(
                .thresholdNotMet,
                "\(name) has \(valid.count) valid signature\(valid.count == 1 ? "" : "s") by the keys of role '\(role)'; its threshold is \(delegated.threshold)",
                path: name)
        }
    }
}

/// `root`: the keys and thresholds of the top-level roles.
package struct TUFRoot: TUFDelegator {
    package let metadata: TUFMetadata
    package let keys: [String: TUFKey]
    package let roles: [String: TUFRole]
    let consistentSnapshot: Bool

    package init(_ metadata: TUFMetadata) throws {
        self.metadata = metadata
        keys = try tufKeys(metadata.signed["keys"], what: "root")
        guard let members = metadata.signed["roles"]?.objectMembers else { throw TUFMetadata.malformed("root has no 'roles' object") }
        var roles: [String: TUFRole] = [:]
        for (name, value) in members { roles[name] = try TUFRole(json: value, name: name) }
        guard Set(roles.keys) == TUFMetadata.topLevelRoles else {
            throw TUFMetadata.malformed(
                "root's roles are \(roles.keys.sorted().joined(separator: ", ")); exactly root, snapshot, targets and timestamp are required")
        }
        self.roles = roles
        switch metadata.signed["consistent_snapshot"] {
        case nil: consistentSnapshot = false
        case .bool(let flag)?: consistentSnapshot = flag
        default: throw TUFMetadata.malformed("root's 'consistent_snapshot' is not a boolean")
        }
    }

    package func delegation(to role: String) -> (keys: [String: TUFKey], role: TUFRole)? {
        roles[role].map { (keys, $0) }
    }
}

/// `timestamp`: the version (and possibly length and hashes) of the current snapshot.
package struct TUFTimestamp: Sendable {
    let metadata: TUFMetadata
    let snapshot: TUFMetaFile

    package init(_ metadata: TUFMetadata) throws {
        self.metadata = metadata
        guard let meta = metadata.signed["meta"]?["snapshot.json"] else { throw TUFMetadata.malformed("timestamp has no meta 'snapshot.json'") }
        snapshot = try TUFMetaFile(json: meta, name: "snapshot.json")
    }
}

/// `snapshot`: the version of every targets metadata file.
package struct TUFSnapshot: Sendable {
    package let metadata: TUFMetadata
    package let meta: [String: TUFMetaFile]

    package init(_ metadata: TUFMetadata) throws {
        self.metadata = metadata
        guard let members = metadata.signed["meta"]?.objectMembers else { throw TUFMetadata.malformed("snapshot has no 'meta' object") }
        var meta: [String: TUFMetaFile] = [:]
        for (name, value) in members { meta[name] = try TUFMetaFile(json: value, name: name) }
        self.meta = meta
    }
}

/// A target (an artifact): its length, hashes and the `custom` object the role signed.
public struct TUFTarget: Sendable {
    /// The target path (`name` in TUF's terms), as the targets role lists it.
    public let path: String
    public let length: Int64
    /// Algorithm → lowercase hex.
    public let hashes: [String: String]
    /// The `custom` object, canonical JSON, when there is one.
    public let custom: [UInt8]?
    let customJSON: TUFJSON?
    /// The first hash as listed: the one a consistent-snapshot repository prefixes the file name with.
    let firstHash: String

    package init(path: String, json: TUFJSON) throws {
        guard let length = json["length"]?.integerValue, length >= 0 else { throw TUFMetadata.malformed("target '\(path)' has no non-negative 'length'") }
        guard let hashes = json["hashes"] else { throw TUFMetadata.malformed("target '\(path)' has no 'hashes'") }
        self.path = path
        self.length = length
        self.hashes = try tufHashes(hashes, what: "target '\(path)'")
        guard let first = hashes.objectMembers?.first?.1.stringValue else { throw TUFMetadata.malformed("target '\(path)' has no hash") }
        firstHash = first
        customJSON = json["custom"]
        custom = customJSON?.canonical
    }
}

/// A role a targets role delegates to.
package struct TUFDelegatedRole: Sendable {
    let name: String
    let role: TUFRole
    let terminating: Bool
    let paths: [String]?
    let pathHashPrefixes: [String]?

    package init(json: TUFJSON) throws {
        guard let name = json["name"]?.stringValue else { throw TUFMetadata.malformed("a delegated role has no 'name'") }
        guard !TUFMetadata.topLevelRoles.contains(name) else { throw TUFMetadata.malformed("a delegation names the top-level role '\(name)'") }
        self.name = name
        role = try TUFRole(json: json, name: name)
        guard let terminating = json["terminating"]?.boolValue else { throw TUFMetadata.malformed("delegated role '\(name)' has no boolean 'terminating'") }
        self.terminating = terminating
        func strings(_ key: String) throws -> [String]? {
            guard let value = json[key] else { return nil }
            guard let items = value.arrayItems else { throw TUFMetadata.malformed("delegated role '\(name)': '\(key)' is not a list") }
            return try items.map {
                guard let text = $0.stringValue else { throw TUFMetadata.malformed("delegated role '\(name)': '\(key)' holds a non-string") }
                return text
            }
        }
        paths = try strings("paths")
        pathHashPrefixes = try strings("path_hash_prefixes")
        guard (paths == nil) != (pathHashPrefixes == nil) else {
            throw TUFMetadata.malformed("delegated role '\(name)' must have exactly one of 'paths' and 'path_hash_prefixes'")
        }
    }

    /// Whether the role is trusted for `target` (§4.5: each `/`-separated part matched by
    /// `fnmatch` against the pattern's part, the same number of parts; or the SHA-256 of the
    /// path starting with one of the prefixes).
    package func matches(_ target: String) -> Bool {
        if let paths {
            let targetParts = target.split(separator: "/", omittingEmptySubsequences: false)
            return paths.contains { pattern in
                let patternParts = pattern.split(separator: "/", omittingEmptySubsequences: false)
                return patternParts.count == targetParts.count
                    && zip(targetParts, patternParts).allSatisfy { fnmatch(String($1), String($0), FNM_NOESCAPE) == 0 }
            }
        }
        guard let digest = try? Digest.compute(Array(target.utf8), algorithm: .sha256).hex else { return false }
        return pathHashPrefixes?.contains { digest.hasPrefix($0) } ?? false
    }
}

/// TAP 15's succinct hash bins: `2^bit_length` roles named `PREFIX-HEX`, one key set for all.
package struct TUFSuccinctRoles: Sendable {
    let role: TUFRole
    let bitLength: Int
    let namePrefix: String

    package init(json: TUFJSON) throws {
        role = try TUFRole(json: json, name: "succinct_roles")
        guard let bits = json["bit_length"]?.integerValue, (1...32).contains(bits) else {
            throw TUFMetadata.malformed("succinct_roles has no bit_length from 1 to 32")
        }
        guard let prefix = json["name_prefix"]?.stringValue else { throw TUFMetadata.malformed("succinct_roles has no 'name_prefix'") }
        bitLength = Int(bits)
        namePrefix = prefix
    }

    private var suffixLength: Int { String((UInt64(1) << bitLength) - 1, radix: 16).count }

    /// The bin `target` falls in.
    package func role(for target: String) -> String {
        let digest = (try? Digest.compute(Array(target.utf8), algorithm: .sha256).bytes) ?? [0, 0, 0, 0]
        let first = digest.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        let bin = UInt64(first) >> UInt64(32 - bitLength)
        let hex = String(bin, radix: 16)
        return "\(namePrefix)-\(String(repeating: "0", count: max(0, suffixLength - hex.count)))\(hex)"
    }

    /// Whether `name` is one of the bins.
    package func contains(_ name: String) -> Bool {
        guard name.hasPrefix(namePrefix + "-") else { return false }
        let suffix = name.dropFirst(namePrefix.count + 1)
        guard suffix.count == suffixLength, let bin = UInt64(suffix, radix: 16), suffix.allSatisfy({ $0.isHexDigit && !$0.isUppercase }) else { return false }
        return bin < (UInt64(1) << bitLength)
    }
}

/// A `targets` role (top-level or delegated): its targets and its delegations.
package struct TUFTargets: TUFDelegator {
    let metadata: TUFMetadata
    package let targets: [String: TUFTarget]
    let delegatedKeys: [String: TUFKey]
    let delegatedRoles: [TUFDelegatedRole]
    let succinct: TUFSuccinctRoles?

    package init(_ metadata: TUFMetadata) throws {
        self.metadata = metadata
        guard let members = metadata.signed["targets"]?.objectMembers else { throw TUFMetadata.malformed("targets has no 'targets' object") }
        var targets: [String: TUFTarget] = [:]
        for (path, value) in members { targets[path] = try TUFTarget(path: path, json: value) }
        self.targets = targets
        guard let delegations = metadata.signed["delegations"] else {
            delegatedKeys = [:]
            delegatedRoles = []
            succinct = nil
            return
        }
        delegatedKeys = try tufKeys(delegations["keys"], what: "delegations")
        switch (delegations["roles"], delegations["succinct_roles"]) {
        case (let roles?, nil):
            guard let items = roles.arrayItems else { throw TUFMetadata.malformed("delegations' 'roles' is not a list") }
            let parsed = try items.map(TUFDelegatedRole.init(json:))
            guard Set(parsed.map(\.name)).count == parsed.count else { throw TUFMetadata.malformed("delegations name a role twice") }
            delegatedRoles = parsed
            succinct = nil
        case (nil, let bins?):
            delegatedRoles = []
            succinct = try TUFSuccinctRoles(json: bins)
        default:
            throw TUFMetadata.malformed("delegations must have exactly one of 'roles' and 'succinct_roles'")
        }
    }

    package func delegation(to role: String) -> (keys: [String: TUFKey], role: TUFRole)? {
        if let delegated = delegatedRoles.first(where: { $0.name == role }) { return (delegatedKeys, delegated.role) }
        if let succinct, succinct.contains(role) { return (delegatedKeys, succinct.role) }
        return nil
    }

    /// The roles to search for `target`, in order, each with whether it terminates the search.
    package func roles(for target: String) -> [(name: String, terminating: Bool)] {
        if let succinct { return [(succinct.role(for: target), true)] }
        return delegatedRoles.filter { $0.matches(target) }.map { ($0.name, $0.terminating) }
    }
}

import Foundation
public import SystemPackage

/// A signed, expiring channel index (FORMAT.md §6): what a channel's devices should run now,
/// re-signed on a schedule so that a mirror that keeps serving an old one is found out when it
/// expires (a freeze attack), and numbered with a rising `serial` so that an old one served
/// again is refused (a replay).
///
/// On disk it is a DSSE envelope (the in-toto / Sigstore signature envelope): the index document
/// as base64 `payload`, its `payloadType`, and `signatures`, each over DSSE's pre-authentication
/// encoding of type and payload. The signed bytes are exactly the payload's bytes: nothing is
/// re-serialised to be checked, and no parser difference can make the signed and the used
/// documents differ.
public struct ChannelIndex: Sendable, Equatable {
    /// The index document's `format`.
    public static let format = "signet-channel/1"
    /// The envelope's `payloadType`.
    public static let payloadType = "application/vnd.signet.channel-index+json"
    /// Largest index accepted (envelope bytes): an index names one package.
    public static let maximumSize = 256 * 1024

    /// The channel the index is for (`stable`, `beta`…).
    public let channel: String
    /// Rises with every index signed for the channel; devices refuse a lower one than they saw.
    public let serial: UInt64
    /// When it was signed.
    public let signed: Timestamp
    /// After this, devices refuse it (`stale-index`).
    public let expires: Timestamp
    /// How it is signed.
    public let algorithm: SignatureAlgorithm
    /// The key that signed it.
    public let keyID: KeyID
    /// The package the channel's devices should run.
    public let package: Package

    /// The package an index names, and what binds it: the whole file's size and SHA-256, and the
    /// SHA-256 of its signed manifest (checked before any resource is fetched).
    public struct Package: Sendable, Equatable {
        public let name: String
        public let version: String
        public let sequence: UInt64
        /// Where it is: relative to the index's URL, or absolute (https://).
        public let url: String
        public let size: UInt64
        /// SHA-256 of the package file, lowercase hex.
        public let sha256: String
        /// SHA-256 of its `.signet/manifest.json`, lowercase hex.
        public let manifestSHA256: String

        /// Creates a package description.
        public init(name: String, version: String, sequence: UInt64, url: String, size: UInt64, sha256: String, manifestSHA256: String) {
            self.name = name
            self.version = version
            self.sequence = sequence
            self.url = url
            self.size = size
            self.sha256 = sha256
            self.manifestSHA256 = manifestSHA256
        }
    }

    /// Creates an index (to be signed with ``signed(by:)``).
    public init(channel: String, serial: UInt64, signed: Timestamp, expires: Timestamp, algorithm: SignatureAlgorithm, keyID: KeyID, package: Package) {
        self.channel = channel
        self.serial = serial
        self.signed = signed
        self.expires = expires
        self.algorithm = algorithm
        self.keyID = keyID
        self.package = package
    }

    /// The index document: compact JSON, keys in a fixed order.
    public var document: [UInt8] {
        var out = ManifestWriter(capacity: 512)
        out.raw("{")
        func field(_ key: String, _ value: (inout ManifestWriter) -> Void, last: Bool = false) {
            out.string(key)
            out.raw(":")
            value(&out)
            if !last { out.raw(",") }
        }
        field("format") { $0.string(Self.format) }
        field("channel") { $0.string(channel) }
        field("serial") { $0.raw(String(serial)) }
        field("signed") { $0.string(signed.rfc3339) }
        field("expires") { $0.string(expires.rfc3339) }
        field("algorithm") { $0.string(algorithm.id) }
        field("key_id") { $0.string(keyID.hex) }
        out.string("package")
        out.raw(":{")
        field("name") { $0.string(package.name) }
        field("version") { $0.string(package.version) }
        field("sequence") { $0.raw(String(package.sequence)) }
        field("url") { $0.string(package.url) }
        field("size") { $0.raw(String(package.size)) }
        field("sha256") { $0.string(package.sha256) }
        field("manifest_sha256", { $0.string(package.manifestSHA256) }, last: true)
        out.raw("}}")
        return out.bytes
    }

    /// DSSE's pre-authentication encoding: what each signature covers.
    static func preAuthenticationEncoding(type: String, payload: [UInt8]) -> [UInt8] {
        Array("DSSEv1 \(type.utf8.count) \(type) \(payload.count) ".utf8) + payload
    }

    /// The envelope, signed by `signer` (which must be the index's key and algorithm).
    public func signed(by signer: Signer) throws -> [UInt8] {
        guard signer.key.keyID == keyID, signer.algorithm == algorithm else {
            throw SignetError(.usage, "the index names key \(keyID.short) and \(algorithm.id), not the signing key \(signer.key.keyID.short) with \(signer.algorithm.id)")
        }
        let payload = document
        let signature = try signer.sign(Self.preAuthenticationEncoding(type: Self.payloadType, payload: payload))
        var out = ManifestWriter(capacity: payload.count * 2 + 1024)
        out.raw("{\n  \"payloadType\": ")
        out.string(Self.payloadType)
        out.raw(",\n  \"payload\": ")
        out.string(Data(payload).base64EncodedString())
        out.raw(",\n  \"signatures\": [{\"keyid\": ")
        out.string(keyID.hex)
        out.raw(", \"sig\": ")
        out.string(Data(signature.bytes).base64EncodedString())
        out.raw("}]\n}\n")
        return out.bytes
    }
}

/// An envelope as read, before its signatures are checked.
struct ChannelEnvelope {
    let payloadType: String
    let payload: [UInt8]
    let signatures: [(keyID: String?, signature: [UInt8])]

    /// Parses an envelope strictly (``StrictJSON``: no duplicate keys or other ambiguities),
    /// within ``ChannelIndex/maximumSize``. Throws `.malformedIndex` (exit 4).
    static func parse(_ bytes: [UInt8], source: String) throws -> ChannelEnvelope {
        func malformed(_ reason: String) -> SignetError {
            SignetError(.malformedIndex, "'\(source)' is not a signed Signet channel index: \(reason)", path: source)
        }
        guard bytes.count <= ChannelIndex.maximumSize else { throw malformed("it is \(bytes.count) bytes, more than the \(ChannelIndex.maximumSize) an index can be") }
        let fields = try FlatFields.parse(bytes, what: "it") { malformed($0) }
        guard case .string(let type)? = fields.values["payloadType"] else { throw malformed("\"payloadType\" is missing or not a string") }
        guard case .string(let payloadText)? = fields.values["payload"], let payload = Data(base64Encoded: payloadText) else {
            throw malformed("\"payload\" is missing or not base64")
        }
        var signatures: [(String?, [UInt8])] = []
        for index in 0..<fields.count("signatures") {
            guard case .string(let text)? = fields.values["signatures.\(index).sig"], let signature = Data(base64Encoded: text) else {
                throw malformed("signature \(index + 1) has no base64 \"sig\"")
            }
            var keyID: String? = nil
            if case .string(let id)? = fields.values["signatures.\(index).keyid"] { keyID = id }
            signatures.append((keyID, Array(signature)))
        }
        guard !signatures.isEmpty else { throw malformed("it has no signatures") }
        return ChannelEnvelope(payloadType: type, payload: Array(payload), signatures: signatures)
    }
}

extension ChannelIndex {
    /// Reads the index inside an envelope without checking its signatures (the publisher's own
    /// file, for its serial; a device always uses ``verified(_:source:policy:channel:now:)``).
    static func unverified(_ bytes: [UInt8], source: String) throws -> ChannelIndex {
        let envelope = try ChannelEnvelope.parse(bytes, source: source)
        return try parse(envelope.payload, source: source)
    }

    /// Verifies an envelope and returns its index and the key that signed it: the payload type,
    /// a signature by a trusted key (revocations, pins and channel folders applied; a key from
    /// another channel's folder is refused, exit 3), the key the index names, the channel
    /// expected (exit 1, `wrong-channel`) and the expiry (exit 1, `stale-index`).
    static func verified(_ bytes: [UInt8], source: String, policy: TrustPolicy, channel expected: String?, now: Timestamp) throws -> (ChannelIndex, PublicKey) {
        let envelope = try ChannelEnvelope.parse(bytes, source: source)
        guard envelope.payloadType == payloadType else {
            throw SignetError(.malformedIndex, "'\(source)' carries a \"\(envelope.payloadType)\" payload, not a Signet channel index", path: source)
        }
        let index = try parse(envelope.payload, source: source)
        let signed = preAuthenticationEncoding(type: payloadType, payload: envelope.payload)
        let verifier = Verifier(policy: policy)
        var last: VerificationResult? = nil
        var signer: PublicKey? = nil
        for candidate in envelope.signatures {
            let result = try verifier.verify(signature: candidate.signature, bytes: signed, algorithm: index.algorithm)
            if let key = result.signer {
                signer = key
                break
            }
            if last == nil || last?.failure != .untrusted { last = result }
        }
        guard let signer else {
            // The index names its signer: one the policy does not accept (not trusted, revoked,
            // unpinned) is an untrusted signer (exit 3), as for a package's manifest.
            if let refusal = policy.refusal(for: index.keyID) {
                throw SignetError(.untrustedSigner, "the channel index '\(source)' is signed by key \(index.keyID.short), which this device does not accept: \(refusal). Nothing was installed", path: source)
            }
            var error = (last ?? VerificationResult(algorithm: index.algorithm, signer: nil, failure: .badSignature, message: "no signature verifies")).error(path: source)!
            error.reason = "the channel index '\(source)' does not verify: \(error.reason)"
            throw error
        }
        if let keyChannel = policy.channel(of: signer.keyID), keyChannel != index.channel {
            throw SignetError(.untrustedSigner, "the channel index '\(source)' is for channel '\(index.channel)', but it is signed by key \(signer.keyID.short), which is trusted for channel '\(keyChannel)' only", path: source)
        }
        guard signer.keyID == index.keyID else {
            throw SignetError(.badSignature, "the channel index '\(source)' names key \(index.keyID.short), but key \(signer.keyID.short) signed it", path: source)
        }
        if let expected, index.channel.utf8.elementsEqual(expected.utf8) == false {
            throw SignetError(.wrongChannel, "'\(source)' is the index of channel '\(index.channel)', not '\(expected)'; check the URL (each channel has its own index)", path: source)
        }
        // Saturating: a skew that would overflow means "far future", never a wrapped past.
        let (deadline, overflow) = index.expires.secondsSinceEpoch.addingReportingOverflow(max(0, policy.clockSkew))
        if !overflow, now.secondsSinceEpoch > deadline {
            let ago = now.secondsSinceEpoch - index.expires.secondsSinceEpoch
            throw SignetError(.staleIndex, "the channel index '\(source)' expired at \(index.expires.rfc3339) (\(Self.duration(ago)) ago): the server may be holding back updates (a freeze), or the publisher stopped re-signing it. Nothing was installed", path: source)
        }
        return (index, signer)
    }

    /// "3 h 5 min", "2 d", "40 s".
    static func duration(_ seconds: Int64) -> String {
        if seconds >= 172_800 { return "\(seconds / 86_400) d" }
        if seconds >= 7_200 { return "\(seconds / 3_600) h" }
        if seconds >= 120 { return "\(seconds / 60) min" }
        return "\(seconds) s"
    }

    /// Parses the index document (strict JSON, whole numbers only). Throws `.malformedIndex`.
    static func parse(_ bytes: [UInt8], source: String) throws -> ChannelIndex {
        func malformed(_ reason: String) -> SignetError {
            SignetError(.malformedIndex, "'\(source)' is not a valid \(Self.format) index: \(reason)", path: source)
        }
        let fields = try FlatFields.parse(bytes, what: "its payload") { malformed($0) }
        func string(_ key: String) throws -> String {
            guard case .string(let text)? = fields.values[key] else { throw malformed("\"\(key)\" is missing or not a string") }
            return text
        }
        func number(_ key: String) throws -> UInt64 {
            guard case .number(let text)? = fields.values[key], let value = UInt64(text) else {
                throw malformed("\"\(key)\" is missing or not a whole number from 0 to \(UInt64.max)")
            }
            return value
        }
        func hex(_ key: String) throws -> String {
            let text = try string(key)
            guard text.utf8.count == 64, text.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else {
                throw malformed("\"\(key)\" is not 64 lowercase hex characters")
            }
            return text
        }
        let written = try string("format")
        guard written == Self.format else { throw malformed("its format is \"\(written)\", not \"\(Self.format)\"") }
        let channel = try string("channel")
        guard Self.isValidChannel(channel) else { throw malformed("the channel name \"\(channel)\" is not 1 to 64 letters, digits, '.', '_' or '-'") }
        guard let signed = Timestamp(rfc3339: try string("signed")) else { throw malformed("\"signed\" is not an RFC 3339 UTC time") }
        guard let expires = Timestamp(rfc3339: try string("expires")) else { throw malformed("\"expires\" is not an RFC 3339 UTC time") }
        guard expires >= signed else { throw malformed("it expires before it was signed") }
        guard let algorithm = SignatureAlgorithm(id: try string("algorithm")) else { throw malformed("unknown algorithm") }
        guard let keyID = KeyID(try hex("key_id")) else { throw malformed("\"key_id\" is not a key id") }
        let name = try string("package.name")
        guard !name.isEmpty else { throw malformed("\"package.name\" is empty") }
        let url = try string("package.url")
        guard !url.isEmpty, url.utf8.count <= 2048, !url.utf8.contains(where: { $0 < 0x20 || $0 == 0x7f }) else {
            throw malformed("\"package.url\" is empty, longer than 2 KiB or holds control characters")
        }
        let package = Package(name: name, version: try string("package.version"), sequence: try number("package.sequence"), url: url,
                              size: try number("package.size"), sha256: try hex("package.sha256"), manifestSHA256: try hex("package.manifest_sha256"))
        return ChannelIndex(channel: channel, serial: try number("serial"), signed: signed, expires: expires, algorithm: algorithm, keyID: keyID, package: package)
    }

    /// Channel names: 1 to 64 of `A-Z a-z 0-9 . _ -` (they name trust folders and state entries).
    public static func isValidChannel(_ name: String) -> Bool {
        (1...64).contains(name.utf8.count) && name.utf8.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5a).contains(byte) || (0x61...0x7a).contains(byte) || byte == 0x2e || byte == 0x5f || byte == 0x2d
        } && name != "." && name != ".."
    }
}

/// Collects a small document's scalars by dotted path (`package.name`, `signatures.0.sig`),
/// and how many elements each array has. For bounded documents (an index), not manifests.
struct FlatFields: StrictJSON.Handler {
    private(set) var values: [String: StrictJSON.Scalar] = [:]
    private var counts: [String: Int] = [:]
    /// The path to the current container, and for arrays the next element's index.
    private var stack: [(path: String, isObject: Bool, next: Int)] = []
    private var key: String? = nil

    func count(_ path: String) -> Int { counts[path] ?? 0 }

    /// Parses `bytes` strictly (``StrictJSON``, whole numbers only); a defect is `malformed`'s
    /// error, saying that `what` ("it", "its payload") is not acceptable JSON.
    static func parse(_ bytes: [UInt8], what: String, _ malformed: (String) -> SignetError) throws -> FlatFields {
        var fields = FlatFields()
        do {
            try StrictJSON.parse(bytes, integersOnly: true, into: &fields)
        } catch let refusal as StrictJSON.Refusal {
            throw malformed("\(what) is not JSON as Signet accepts it: \(refusal)")
        } catch let ambiguous as Ambiguous {
            throw malformed("\(what) names \"\(ambiguous.path)\" twice")
        }
        return fields
    }

    private mutating func nextPath() -> String {
        guard let top = stack.last else { return "" }
        let component: String
        if top.isObject {
            component = key ?? ""
        } else {
            component = String(top.next)
            stack[stack.count - 1].next += 1
            counts[top.path] = top.next + 1
        }
        key = nil
        return top.path.isEmpty ? component : top.path + "." + component
    }

    mutating func begin(isObject: Bool) throws {
        let path = stack.isEmpty ? "" : nextPath()
        stack.append((path, isObject, 0))
    }

    mutating func end() throws { stack.removeLast() }

    mutating func key(_ key: String) throws { self.key = key }

    /// Two values at one path (a key `"a.b"` beside an object `a` with key `b`).
    struct Ambiguous: Error {
        let path: String
    }

    mutating func scalar(_ value: StrictJSON.Scalar) throws {
        let path = nextPath()
        guard values[path] == nil else { throw Ambiguous(path: path) }
        values[path] = value
    }
}

extension ChannelIndex {
    /// Describes the package file at `path` for an index: its manifest's name, version and
    /// sequence, the SHA-256 of the manifest's bytes, and the file's size and SHA-256. `url` is
    /// where devices will find it (relative to the index's URL, or absolute).
    public static func package(at path: String, url: String, limits: PackageLimits = PackageLimits()) throws -> Package {
        let reader = try ZipReader(path: path, maximumEntries: limits.maximumEntries)
        let layout = try PackageReader.Layout(reader: reader, limits: limits)
        guard let entry = layout.manifest else {
            throw SignetError(.packageInvalid, "'\(path)' has no signed manifest (a bare package): a channel index binds a manifest", path: path)
        }
        let bytes = try reader.readAll(entry, limit: limits.maxManifestSize, name: TreeLayout.manifest)
        let manifest = try Manifest.parse(bytes)
        let whole = try Digest.compute(fileAt: path, algorithm: .sha256)
        let size = try InputFile.open(path, what: "package").size
        return Package(name: manifest.name, version: manifest.version, sequence: manifest.sequence, url: url, size: UInt64(size),
                       sha256: whole.hex, manifestSHA256: try Digest.compute(bytes, algorithm: .sha256).hex)
    }

    /// Signs an index for `package` into `out`, replacing it atomically: serial `serial` if
    /// given (it must be higher than that of the index `out` holds), else one higher than that
    /// index's and at least the current Unix time (so that a publisher who lost the file still
    /// counts up). Expires `lifetime` seconds from now.
    @discardableResult
    public static func publish(_ package: Package, channel: String, signer: Signer, lifetime: Int64, serial: UInt64? = nil,
                               out: String, now: Timestamp = .now) throws -> ChannelIndex {
        guard isValidChannel(channel) else {
            throw SignetError(.usage, "the channel name '\(channel)' is not 1 to 64 letters, digits, '.', '_' or '-'")
        }
        guard lifetime > 0, lifetime <= 366 * 86_400 else {
            throw SignetError(.usage, "an index lives 1 second to 366 days, not \(lifetime) seconds")
        }
        var previous: ChannelIndex? = nil
        if FileManager.default.fileExists(atPath: out) {
            let bytes = try InputFile.open(out, what: "channel index").readAll(limit: maximumSize, what: "channel index")
            do {
                previous = try unverified(bytes, source: out)
            } catch {
                throw SignetError(.malformedIndex, "'\(out)' exists but is not a channel index, so its serial is unknown: move it away, or give --serial higher than the last one devices saw", path: out)
            }
        }
        if let previous, previous.channel != channel {
            throw SignetError(.usage, "'\(out)' is the index of channel '\(previous.channel)', not '\(channel)'; each channel has its own index file", path: out)
        }
        if let previous, previous.serial == UInt64.max {
            throw SignetError(.usage, "the index '\(out)' has the highest serial there is (2^64-1): no higher one exists, and devices refuse a lower one; move channels to a TUF repository (signet repo)", path: out)
        }
        let floor = previous.map { $0.serial + 1 } ?? 1
        let chosen: UInt64
        if let serial {
            guard serial >= floor else {
                throw SignetError(.usage, "--serial \(serial) is not higher than the serial \(previous?.serial ?? 0) of the index '\(out)' replaces; devices would refuse it as a replay")
            }
            chosen = serial
        } else {
            chosen = max(floor, UInt64(max(0, now.secondsSinceEpoch)))
        }
        let index = ChannelIndex(channel: channel, serial: chosen, signed: now, expires: Timestamp(secondsSinceEpoch: now.secondsSinceEpoch + lifetime),
                                 algorithm: signer.algorithm, keyID: signer.key.keyID, package: package)
        try AtomicFile.write(try index.signed(by: signer), to: out, mode: 0o644, replace: true)
        return index
    }

    /// Verifies the envelope `bytes` (read from `source`) for a device following `channel`.
    public static func verify(_ bytes: [UInt8], source: String, policy: TrustPolicy, channel: String?, now: Timestamp = .now) throws -> ChannelIndex {
        try verified(bytes, source: source, policy: policy, channel: channel, now: now).0
    }
}

// MARK: Swift-native forms (issue 41): FilePath

extension ChannelIndex {
    /// ``package(at:url:limits:)-(String,_,_)`` with a `FilePath`.
    public static func package(at path: FilePath, url: String, limits: PackageLimits = PackageLimits()) throws -> Package {
        try package(at: path.string, url: url, limits: limits)
    }

    /// ``publish(_:channel:signer:lifetime:serial:out:now:)-(_,_,_,_,_,String,_)`` with a `FilePath`.
    @discardableResult
    public static func publish(_ package: Package, channel: String, signer: Signer, lifetime: Int64, serial: UInt64? = nil,
                               out: FilePath, now: Timestamp = .now) throws -> ChannelIndex {
        try publish(package, channel: channel, signer: signer, lifetime: lifetime, serial: serial, out: out.string, now: now)
    }
}

import SignetCore

/// An offline proof that an entry is in a log (c2sp.org/tlog-proof@v1): optional extra data,
/// the entry's index, its inclusion proof, and the log's signed checkpoint with its
/// cosignatures — what a device checks against its policy before it installs a release.
public struct TransparencyProof: Sendable, Equatable {
    public static let header = "c2sp.org/tlog-proof@v1"
    /// Longest proof read (a proof is about a kilobyte).
    public static let largest = 64 << 10

    public let extra: [UInt8]?
    public let index: UInt64
    /// The inclusion proof, the leaf's sibling first (RFC 6962 §2.1.1).
    public let hashes: [[UInt8]]
    /// The signed checkpoint note, verbatim.
    public let checkpoint: [UInt8]

    public init(extra: [UInt8]? = nil, index: UInt64, hashes: [[UInt8]], checkpoint: [UInt8]) {
        self.extra = extra
        self.index = index
        self.hashes = hashes
        self.checkpoint = checkpoint
    }

    /// Reads a proof's bytes.
    public init(_ bytes: [UInt8]) throws {
        guard bytes.count <= Self.largest else { throw Self.malformed("longer than \(Self.largest) bytes") }
        guard let blank = bytes.indices.dropLast().first(where: { bytes[$0] == 0x0a && bytes[$0 + 1] == 0x0a }) else {
            throw Self.malformed("no blank line before the checkpoint")
        }
        guard let head = String(validating: bytes[..<blank], as: UTF8.self) else { throw Self.malformed("not UTF-8") }
        var lines = head.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        guard lines.first == Self.header else { throw Self.malformed("its first line is not \(Self.header)") }
        lines.removeFirst()
        var extra: [UInt8]? = nil
        if let first = lines.first, first.hasPrefix("extra ") {
            guard let data = [UInt8](base64: String(first.dropFirst(6))) else { throw Self.malformed("its extra data is not base64") }
            extra = data
            lines.removeFirst()
        }
        guard let indexLine = lines.first, indexLine.hasPrefix("index ") else { throw Self.malformed("no index line") }
        let digits = indexLine.dropFirst(6)
        guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), digits == "0" || !digits.hasPrefix("0"), let index = UInt64(digits)
        else { throw Self.malformed("its index is not a decimal number of 64 bits without leading zeros") }
        lines.removeFirst()
        var hashes: [[UInt8]] = []
        for line in lines {
            guard let hash = [UInt8](base64: line), hash.count == 32 else { throw Self.malformed("a proof line is not the base64 of a SHA-256 hash") }
            hashes.append(hash)
        }
        guard hashes.count <= 64 else { throw Self.malformed("more than 64 proof hashes") }
        self.init(extra: extra, index: index, hashes: hashes, checkpoint: Array(bytes[(blank + 2)...]))
    }

    /// The proof's bytes.
    public var bytes: [UInt8] {
        var lines = [Self.header]
        if let extra { lines.append("extra " + extra.base64EncodedString()) }
        lines.append("index \(index)")
        lines += hashes.map { $0.base64EncodedString() }
        return Array((lines.joined(separator: "\n") + "\n\n").utf8) + checkpoint
    }

    /// Checks the proof for the entry whose leaf hash is `leaf`: the checkpoint signed by
    /// `log` with origin `origin`, cosigned by at least `quorum` of `witnesses` (each counted
    /// once), and the leaf at the proof's index in the checkpoint's tree. Returns the
    /// checkpoint. Any failure is `.notLogged` (exit 3), naming what did not hold.
    public func verify(leaf: [UInt8], origin: String, log: NoteVerifierKey, witnesses: [NoteVerifierKey], quorum: Int) throws -> Checkpoint {
        try verify(leaf: leaf, logs: [log], witnesses: witnesses, origin: origin) { cosigners in
            cosigners.count >= quorum ? nil : "\(cosigners.count) of the policy's witnesses cosigned the checkpoint, \(quorum) needed"
        }.checkpoint
    }

    /// Checks the proof against a policy: the checkpoint signed by one of its logs (the key's
    /// name is the checkpoint's origin), its quorum of witnesses, the leaf included. Returns
    /// the checkpoint and the log that signed it; failures are `.notLogged`.
    public func verify(leaf: [UInt8], policy: TransparencyPolicy) throws -> (checkpoint: Checkpoint, log: NoteVerifierKey) {
        try verify(leaf: leaf, logs: policy.logs.map(\.key), witnesses: policy.witnesses.map(\.key), origin: nil) { cosigners in
            policy.isMet(by: cosigners)
                ? nil
                : "\(cosigners.count) of the policy's witnesses cosigned the checkpoint (\(cosigners.map(\.name).joined(separator: ", "))); its quorum needs at least \(policy.fewestCosigners)"
        }
    }

    private func verify(
        leaf: [UInt8], logs: [NoteVerifierKey], witnesses: [NoteVerifierKey], origin: String?, quorum: ([NoteVerifierKey]) -> String?
    ) throws -> (checkpoint: Checkpoint, log: NoteVerifierKey) {
        func refuse(_ why: String) -> SignetError { SignetError(.notLogged, "the release's log proof does not hold: \(why)") }
        let note: SignedNote
        do {
            note = try SignedNote.open(checkpoint, known: logs + witnesses)
        } catch let error as SignetError {
            throw refuse(error.reason)
        }
        guard let log = note.verifiedBy.first(where: { logs.contains($0) }) else {
            throw refuse("no log key of the policy (\(logs.map(\.name).joined(separator: ", "))) signed the checkpoint")
        }
        let cosigners = note.verifiedBy.filter { !logs.contains($0) && witnesses.contains($0) }
        if let failure = quorum(cosigners) { throw refuse(failure) }
        let checkpoint: Checkpoint
        do {
            checkpoint = try Checkpoint(text: note.text)
        } catch let error as SignetError {
            throw refuse(error.reason)
        }
        let expected = origin ?? log.name
        guard checkpoint.origin == expected else { throw refuse("the checkpoint is of log '\(checkpoint.origin)', not '\(expected)'") }
        guard index < checkpoint.size, checkpoint.size <= UInt64(Int.max),
            TileTree.verifyInclusion(leaf: leaf, index: Int(index), size: Int(checkpoint.size), proof: hashes, root: checkpoint.rootHash)
        else { throw refuse("the release is not entry \(index) of the checkpoint's tree of \(checkpoint.size)") }
        return (checkpoint, log)
    }

    static func malformed(_ why: String) -> SignetError { SignetError(.malformedInput, "not a log proof: \(why) (c2sp.org/tlog-proof)") }
}

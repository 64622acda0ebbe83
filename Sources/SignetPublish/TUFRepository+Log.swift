#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import SignetCore
import SignetTUF
import SignetCrypto
import SignetNetwork

extension TUFRepository {
    // MARK: The transparency log (FORMAT.md §10)

    /// The log's folder, published beside `metadata/` and `targets/`.
    public var logDirectory: String { path + "/log" }
    /// The policy the publisher gathers cosignatures under (its witnesses' URLs): private.
    var logPolicyFile: String { stagingDirectory + "/tlog-policy" }

    /// Whether the repository keeps a log: then every release it publishes needs a proof.
    public var keepsLog: Bool { FileManager.default.fileExists(atPath: logDirectory + "/checkpoint") }

    /// What an append did.
    public struct LogOutcome: Sendable {
        /// The releases appended now (target names), in order, and their indexes.
        public let appended: [(target: String, index: Int)]
        /// The published checkpoint.
        public let checkpoint: Checkpoint
        /// The witnesses that cosigned it, and why each other one did not.
        public let cosigners: [String]
        public let refusals: [String]
        /// Proofs written (one per listed release).
        public let proofs: Int
    }

    /// Starts the repository's log, signed by `key` (its name is the log's origin): the empty
    /// log's checkpoint in `log/`, and `policy` (which witnesses must cosign) kept for appends
    /// and staged into the next root as `custom.signet.tlog`, so devices enforce it once the
    /// root key holders have signed that root. Returns the staged root version.
    @discardableResult
    public func createLog(key: NoteSignerKey, policy: TransparencyPolicy, now: Timestamp = .now) throws -> Int64 {
        guard policy.logs.contains(where: { $0.key == key.verifier }) else {
            throw SignetError(.usage, "the policy's log lines do not name the log key \(key.verifier) (add `log \(key.verifier)` to it)")
        }
        _ = try TransparencyLog.create(at: logDirectory, key: key)
        try AtomicFile.write(Array(policy.text.utf8), to: logPolicyFile, mode: 0o600, replace: true)
        return try stageLogPolicy(policy, now: now)
    }

    /// Stages the next root version (or changes the staged one) with `policy` as its
    /// `custom.signet.tlog`: the root threshold decides what devices enforce.
    @discardableResult
    public func stageLogPolicy(_ policy: TransparencyPolicy, now: Timestamp = .now) throws -> Int64 {
        var document: TUFDocument
        if let staged = try staged("root") {
            document = staged
        } else {
            let root = try publishedRoot()
            document = try TUFDocument(bytes: try latest("root")?.bytes ?? [], name: "\(root.metadata.version).root.json")
            let (next, overflow) = root.metadata.version.addingReportingOverflow(1)
            guard !overflow else { throw SignetError(.usage, "the root role is at the highest version there is") }
            document.set([("version", .number(String(next))), ("expires", .string(Self.expiry(now, lifetimes.root)))])
        }
        document.signatures = []
        var custom = document.signed["custom"]?.objectMembers ?? []
        var signet = custom.first(where: { $0.0 == "signet" })?.1.objectMembers ?? []
        signet.removeAll { $0.0 == "tlog" }
        signet.append(("tlog", .string(policy.text)))
        custom.removeAll { $0.0 == "signet" }
        custom.append(("signet", .object(signet)))
        document.set([("custom", .object(custom))])
        try writeStaged("root", document)
        return document.version
    }

    /// Replaces the log's policy: the publisher's copy now, devices' once the staged root that
    /// carries it is signed and published. It must still name the log's key.
    @discardableResult
    public func replaceLogPolicy(_ policy: TransparencyPolicy, now: Timestamp = .now) throws -> Int64 {
        let log = try openLog(try logPolicy())
        guard policy.logs.contains(where: { $0.key == log.key }) else {
            throw SignetError(.usage, "the new policy does not name the log's key \(log.key) (its `log` line): devices would refuse every proof")
        }
        try AtomicFile.write(Array(policy.text.utf8), to: logPolicyFile, mode: 0o600, replace: true)
        return try stageLogPolicy(policy, now: now)
    }

    /// The policy kept by ``createLog(key:policy:now:)``.
    public func logPolicy() throws -> TransparencyPolicy {
        guard FileManager.default.fileExists(atPath: logPolicyFile) else {
            throw SignetError(.fileNotFound, "the repository keeps no log: start one with `signet log init`", path: logDirectory)
        }
        return try TransparencyPolicy(text: String(decoding: try readSmallFile(logPolicyFile, what: "the log's policy", limit: 1 << 20), as: UTF8.self))
    }

    /// The releases the repository lists (the staged targets version, else the newest
    /// published one), each with its log entry.
    func listedReleases() throws -> [(target: TUFPackageTarget, entry: [UInt8])] {
        let document = try staged("targets") ?? latest("targets").map { try TUFDocument(bytes: $0.bytes, name: "\($0.version).targets.json") }
        var releases: [(TUFPackageTarget, [UInt8])] = []
        for (name, value) in document?.signed["targets"]?.objectMembers ?? [] {
            guard let target = try? TUFTarget(path: name, json: value), let release = TUFPackageTarget(target) else { continue }
            releases.append((release, try release.logEntry()))
        }
        return releases
    }

    /// Appends every listed release the log lacks, has the new checkpoint cosigned by the
    /// policy's witnesses until its quorum is met (nothing is published otherwise), publishes
    /// it, and writes each listed release's proof beside its package (`targets/SHA256.NAME.tlog-proof`).
    public func appendToLog(key: NoteSignerKey, download: DownloadOptions = DownloadOptions(), now: Timestamp = .now) throws -> LogOutcome {
        let policy = try logPolicy()
        var log = try TransparencyLog(at: logDirectory, key: key.verifier)
        let releases = try listedReleases()
        var known = Set(log.tree.leafHashes)
        var fresh: [(String, [UInt8])] = []
        for (release, entry) in releases where !known.contains(TileTree.leafHash(entry)) {
            known.insert(TileTree.leafHash(entry))
            fresh.append((release.target, entry))
        }
        let start = log.tree.size
        var cosigners: [String] = []
        var refusals: [String] = []
        if !fresh.isEmpty {
            let next = try log.append(fresh.map(\.1))
            let signed = try SignedNote.sign(next.text, by: [key])
            var witnessing = WitnessClient(log: log, policy: policy, download: download)
            let (note, names, failures) = try witnessing.cosign(signed, checkpoint: next)
            (cosigners, refusals) = (names, failures)
            try log.publish(checkpoint: note)
        }
        let proofs = try writeProofs(releases.map(\.target), log: log)
        return LogOutcome(
            appended: fresh.enumerated().map { ($0.element.0, start + $0.offset) }, checkpoint: log.checkpoint, cosigners: cosigners,
            refusals: refusals, proofs: proofs)
    }

    /// Writes the proof of each of `releases` in the published log, against its checkpoint.
    func writeProofs(_ releases: [TUFPackageTarget], log: TransparencyLog) throws -> Int {
        let size = Int(log.checkpoint.size)
        var indexes: [[UInt8]: Int] = [:]
        for (index, hash) in log.tree.leafHashes.prefix(size).enumerated() where indexes[hash] == nil { indexes[hash] = index }
        var written = 0
        for release in releases {
            guard let index = indexes[try release.logLeafHash()] else { continue }
            let proof = TransparencyProof(
                extra: try release.logEntry(), index: UInt64(index), hashes: log.tree.inclusionProof(index: index, size: size), checkpoint: log.checkpointNote)
            // Each atomic; all made durable together below (one syncfs, not a journal commit each).
            try AtomicFile.write(
                proof.bytes, to: "\(targetsDirectory)/\(release.sha256).\(release.target).tlog-proof", mode: 0o644, replace: true, durable: false)
            written += 1
        }
        if written > 0 { try AtomicFile.syncFilesystem(of: targetsDirectory) }
        return written
    }

    /// The log, opened with the policy's log key that signed its checkpoint.
    func openLog(_ policy: TransparencyPolicy) throws -> TransparencyLog {
        var failure: Error? = nil
        for log in policy.logs {
            do { return try TransparencyLog(at: logDirectory, key: log.key) } catch { failure = error }
        }
        throw failure ?? SignetError(.usage, "the log's policy names no log key")
    }

    /// The releases of `document` (a targets version about to be published) the log does not
    /// hold in its published checkpoint: a repository that keeps a log publishes none of them.
    func unloggedReleases(of document: TUFDocument) throws -> [String] {
        guard keepsLog else { return [] }
        let log = try openLog(try logPolicy())
        let held = Set(log.tree.leafHashes.prefix(Int(log.checkpoint.size)))
        var missing: [String] = []
        for (name, value) in document.signed["targets"]?.objectMembers ?? [] {
            guard let target = try? TUFTarget(path: name, json: value), let release = TUFPackageTarget(target) else { continue }
            if !held.contains(try release.logLeafHash()) { missing.append(name) }
        }
        return missing
    }
}

extension TUFRepository {
    /// A release the log holds that no published targets version lists.
    public struct UnlistedRelease: Sendable, Equatable {
        public let index: Int
        public let name: String
        public let version: String
        public let sequence: String
        public let manifestSHA256: String
    }

    /// The monitor's question (`signet log monitor`): which entries of the log name a package
    /// this repository publishes but are listed by none of its published targets versions — a
    /// release signed with a targets key and shown to some devices only. The log is opened with
    /// the policy of the newest published root (`custom.signet.tlog`).
    public func unlistedLogEntries() throws -> (logged: Int, unlisted: [UnlistedRelease]) {
        guard let (version, bytes) = try latest("root"),
            let text = try TUFDocument(bytes: bytes, name: "\(version).root.json").signed["custom"]?["signet"]?["tlog"]?.stringValue
        else {
            throw SignetError(.fileNotFound, "the repository's published root carries no transparency policy (custom.signet.tlog)", path: metadataDirectory)
        }
        let log = try openLog(try TransparencyPolicy(text: text))
        var listed = Set<[UInt8]>()
        var names = Set<String>()
        let files = (try? FileManager.default.contentsOfDirectory(atPath: metadataDirectory)) ?? []
        for file in files where file.hasSuffix(".targets.json") {
            let document = try TUFDocument(bytes: try readSmallFile("\(metadataDirectory)/\(file)", what: "targets metadata", limit: 64 << 20), name: file)
            for (name, value) in document.signed["targets"]?.objectMembers ?? [] {
                guard let target = try? TUFTarget(path: name, json: value), let release = TUFPackageTarget(target) else { continue }
                listed.insert(try release.logEntry())
                names.insert(release.name.lowercased())
            }
        }
        let size = Int(log.checkpoint.size)
        var unlisted: [UnlistedRelease] = []
        var start = 0
        while start < size {
            let end = min(size, start + TileTree.width)
            for (offset, entry) in try log.entries(start..<end).enumerated() where !listed.contains(entry) {
                var fields: [String: String] = [:]
                for line in String(decoding: entry, as: UTF8.self).split(separator: "\n") {
                    let parts = line.split(separator: " ", maxSplits: 1)
                    if parts.count == 2 { fields[String(parts[0])] = String(parts[1]) }
                }
                guard let name = fields["name"], names.contains(name.lowercased()) else { continue }
                unlisted.append(
                    UnlistedRelease(
                        index: start + offset, name: name, version: fields["version"] ?? "", sequence: fields["sequence"] ?? "",
                        manifestSHA256: fields["manifest-sha256"] ?? ""))
            }
            start = end
        }
        return (size, unlisted)
    }
}

extension TUFRepository {
    /// The log's published checkpoint, the policy's witnesses that cosigned it, and the listed
    /// releases (staged or published) it does not hold.
    public func logStatus() throws -> (checkpoint: Checkpoint, cosigners: [String], unlogged: [String]) {
        let policy = try logPolicy()
        let log = try openLog(policy)
        let opened = try SignedNote.open(log.checkpointNote, known: policy.logs.map(\.key) + policy.witnesses.map(\.key))
        let cosigners = policy.witnesses.filter { opened.verifiedBy.contains($0.key) }.map(\.name)
        let held = Set(log.tree.leafHashes.prefix(Int(log.checkpoint.size)))
        let unlogged = try listedReleases().filter { !held.contains(TileTree.leafHash($0.entry)) }.map(\.target.target)
        return (log.checkpoint, cosigners, unlogged)
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import CSignetSystem
internal import SystemPackage
import SignetCore
import SignetCrypto
import SignetManifest
import SignetNetwork
import SignetPackage

/// How `unpack URL` moved the package (``InstallReport/transfer``; `--json`'s `transfer`).
public struct TransferReport: Sendable, Equatable {
    /// How the package was read.
    public enum Mode: String, Sendable {
        /// With HTTP range requests: the end of the zip, its directory, the package's own
        /// entries, then only the resources the installed tree did not hold.
        case ranges
        /// Downloaded whole beside the destination first (a server without ranges, or
        /// `--full-download`).
        case full
    }

    /// How the package was read.
    public let mode: Mode
    /// Body bytes received from the server, every request included.
    public let bytesDownloaded: UInt64
    /// HTTP range requests made (retries included); 1 for a full download.
    public let requests: Int
    /// Resources read from the package.
    public let filesFetched: Int
    /// Resources copied from the installed tree instead (each hashed against the manifest).
    public let filesReused: Int
    /// Resources an earlier, interrupted run of the same update had staged, copied from what it
    /// left (each hashed against the manifest) instead of fetched again.
    public let filesResumed: Int
    /// Bytes of the resources read from the package.
    public let bytesFetched: UInt64
    /// Bytes of all the resources.
    public let bytesTotal: UInt64
    /// The package's size on the server.
    public let packageSize: UInt64
    /// Chunks of changed large resources rebuilt wholly from the installed copies (FORMAT.md
    /// §2, `chunks`).
    public var chunksReused = 0
    /// Bytes of changed large resources read from the installed copies (whole chunks and
    /// unchanged blocks of the others).
    public var chunkBytesReused: UInt64 = 0
    /// Chunks of changed large resources that needed bytes from the package.
    public var chunksFetched = 0
    /// Bytes of changed large resources fetched from the package.
    public var chunkBytesFetched: UInt64 = 0
    /// Leading chunks of large resources that an interrupted run had staged, checked against
    /// the signed index and kept.
    public var chunksResumed = 0
    /// Their bytes.
    public var chunkBytesResumed: UInt64 = 0
    /// Bytes of stored files without a chunk index that an interrupted run of the same package
    /// (the same validator) had staged, continued at their byte offset.
    public var fileBytesResumed: UInt64 = 0
    /// Bytes of range answers that a run killed in the middle of them (SIGKILL, a power cut)
    /// had received and journalled in its staging tree, used instead of being asked for again.
    public var answerBytesResumed: UInt64 = 0
}

/// An update of an installed tree from a package read with range requests (FORMAT.md §5,
/// "Updates over range requests"). Once the manifest verified, every resource whose path, size
/// and SHA-256 equal a file of the installed tree's manifest is copied from that tree into the
/// staging directory and hashed as it is copied; only the others are fetched, their entries
/// planned as a few large requests. A copy that does not hash to the manifest (the installed
/// file was modified) is discarded and the entry fetched: a local change never propagates.
final class RangedUpdate {
    /// The package on the server: its requests, validator and journal.
    let input: RangedInput
    /// What the archive layer reads and the update plans, in the signed package's offsets: the
    /// ranged input itself, or the signed package inside an encrypted one read through it.
    var archive: any PlannedInput
    let destination: String
    private var installed: [String: (size: UInt64, sha256: String)] = [:]
    /// The installed files' chunk indexes, by path (from DIR's verified manifest).
    private var installedChunks: [String: (chunks: ChunkIndex, size: UInt64)] = [:]
    /// What rebuilding changed large resources from their chunks did.
    private var chunkCounts = ChunkCounts()
    /// Bytes of files continued at their byte offset.
    private var fileBytesResumed: UInt64 = 0
    /// The installed tree (nil: none, or it cannot be opened).
    private(set) var root: SharedDescriptor? = nil
    private var fetched = 0
    private var reusedCount = 0
    private var bytesFetched: UInt64 = 0
    private var bytesTotal: UInt64 = 0
    /// Bytes expected in all once the plan is made (what was read before it included).
    private var planned: UInt64? = nil
    var plannedBytes: UInt64? { planned }

    /// What earlier runs left staged, taken over for this update.
    let leftovers: StagedLeftovers
    private var resumed = 0
    /// Reused files shared with the installed tree (hard links), not copied.
    private(set) var linked = 0
    /// Where each resource comes from, in manifest order.
    private enum Origin {
        /// Fetched from the package.
        case fetch
        /// Copied from the installed tree.
        case installed
        /// Already in the staging tree (an earlier run staged it); `unchanged`: the installed
        /// tree holds the same content (counted as reused, not resumed).
        case staged(unchanged: Bool)
        /// Rebuilt from the installed copy's chunks and the fetched rest.
        case rebuild(ChunkPlan)
        /// Continued at byte `from` of what an interrupted run of the same package staged (a
        /// stored file without a chunk index): the rest read from the entry's bytes at `data`.
        case continued(data: Range<UInt64>, from: UInt64)
    }
    private var origins: [Origin] = []
    /// Whether a reused file's signature may come from its own `user.signet.sig` instead of
    /// the package's entry: for a deterministic algorithm (PKCS#1 v1.5: the same key
    /// and digest give the same bytes, which `.signet/signatures.sig` then covers as before),
    /// until one does not verify with the manifest's key (a new key: every signature differs).
    private var installedSignatures = false
    /// The signature entries of the reused files, planned once they are needed after all.
    private var reusedSignatureSpans: [Range<Int64>] = []

    /// Requests and bytes of earlier passes of this update (a package that changed on the
    /// server mid-way is read again): reported with this one's.
    private let earlier: (requests: Int, bytes: UInt64)

    init(input: RangedInput, destination: String, leftovers: StagedLeftovers, earlier: (requests: Int, bytes: UInt64) = (0, 0)) {
        self.input = input
        archive = input
        self.destination = destination
        self.leftovers = leftovers
        self.earlier = earlier
    }

    var report: TransferReport {
        var report = TransferReport(
            mode: .ranges, bytesDownloaded: earlier.bytes &+ input.bytesReceived, requests: earlier.requests + input.requests, filesFetched: fetched,
            filesReused: reusedCount, filesResumed: resumed, bytesFetched: bytesFetched, bytesTotal: bytesTotal,
            packageSize: UInt64(input.size))
        report.chunksReused = chunkCounts.reused
        report.chunkBytesReused = chunkCounts.bytesReused
        report.chunksFetched = chunkCounts.fetched
        report.chunkBytesFetched = chunkCounts.bytesFetched
        report.chunksResumed = chunkCounts.resumed
        report.chunkBytesResumed = chunkCounts.bytesResumed
        report.fileBytesResumed = fileBytesResumed
        report.answerBytesResumed = input.preloaded
        return report
    }

    /// Called once the manifest verified (the staging tree made): decides, per resource in
    /// manifest order, where it comes from; moves what earlier runs staged into `staging`
    /// (then removes their trees), and plans the requests for every resource to fetch.
    func prepare(
        _ resources: [Manifest.File], manifest: Manifest?, job: Installer.Job, state: DestinationState, staging: Staging,
        algorithm: SignatureAlgorithm?
    ) throws {
        installedSignatures = algorithm.map { !$0.isPSS } ?? false
        bytesTotal = resources.reduce(0) { $0 &+ $1.size }
        if case .installed(let manifest?) = state {
            installed.reserveCapacity(manifest.files.count)
            for file in manifest.files {
                installed[file.path] = (file.size, file.sha256)
                if let chunks = file.chunks { installedChunks[file.path] = (chunks, file.size) }
            }
            if let opened = try? Paths.open(destination, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) { root = SharedDescriptor(opened) }
        }
        origins = [Origin](repeating: .fetch, count: resources.count)
        var spans: [Range<Int64>] = [], signatureSpans: [Range<Int64>] = []
        /// Changed files with a chunk index that an installed copy or an interrupted run's
        /// staged start may serve.
        var chunked: [ChunkCandidate] = []
        // The package this tree is staged from; an earlier run's tree from the same one may
        // have files cut short that continue where they stopped.
        let source = input.validator.map { "\($0) \(input.size)" }
        if let source { staging.markSource(source) }
        let sameSource = leftovers.trees.filter { source != nil && Staging.source(of: $0.root.descriptor) == source }
        // What a run killed mid-answer had received of this same package is used as if it
        // had just arrived; from here on, answers are journalled as they arrive.
        for tree in sameSource {
            guard let folder = Staging.rangeJournalFolder(of: tree.root.descriptor) else { continue }
            input.preload(RangeJournal.takeParts(from: folder.descriptor, size: input.size, limit: RangedInput.cacheLimit))
        }
        if source != nil, let folder = staging.rangeJournalFolder() { input.journal = RangeJournal(folder: folder) }
        var continued: [(index: Int, file: Manifest.File)] = []
        for (index, file) in resources.enumerated() {
            let old = root == nil || file.sha256.isEmpty ? nil : installed[file.path]
            let unchanged = old.map { $0.size == file.size && $0.sha256 == file.sha256 } ?? false
            let signature = signatureSpan(of: file, job: job)
            if leftovers.trees.contains(where: { staging.moveIn(file.path, from: $0.root.descriptor, size: file.size) }) {
                origins[index] = .staged(unchanged: unchanged)
                reusedSignatureSpans += signature.map { [$0] } ?? []
            } else if unchanged {
                origins[index] = .installed
                reusedSignatureSpans += signature.map { [$0] } ?? []
            } else if !file.isChunked, file.structured == nil, job.layout.resource(file.path)?.method == 0,
                sameSource.contains(where: { staging.moveIn(file.path, from: $0.root.descriptor, below: file.size) })
            {
                continued.append((index, file))
            } else if file.isChunked, !leftovers.trees.isEmpty || (old != nil && !job.options.force) {
                let reusable = job.options.force ? nil : old.map { ($0.size, installedChunks[file.path]?.chunks) }
                chunked.append(ChunkCandidate(index: index, file: file, installed: reusable))
            } else {
                spans += span(of: file, job: job).map { [$0] } ?? []
                signatureSpans += signature.map { [$0] } ?? []
            }
        }
        for (index, file, continuation) in continuations(continued, job: job, staging: staging) {
            if let continuation {
                origins[index] = .continued(data: continuation.data, from: continuation.from)
                spans.append(Int64(continuation.data.lowerBound + continuation.from)..<Int64(continuation.data.upperBound))
            } else {
                spans += span(of: file, job: job).map { [$0] } ?? []
            }
            signatureSpans += signatureSpan(of: file, job: job).map { [$0] } ?? []
        }
        for (candidate, plan) in zip(chunked, try chunkPlans(chunked, job: job, staging: staging, manifest: manifest)) {
            if let plan {
                origins[candidate.index] = .rebuild(plan)
                spans += plan.fetchRanges
            } else {
                spans += span(of: candidate.file, job: job).map { [$0] } ?? []
            }
            signatureSpans += signatureSpan(of: candidate.file, job: job).map { [$0] } ?? []
        }
        installed.removeAll()
        installedChunks.removeAll()
        // What the earlier trees still hold is not part of the new tree.
        leftovers.remove()
        archive.plan(spans)
        // Signature entries are small and many, and theirs is metadata: the gaps between them
        // are read through rather than asked for as parts of their own.
        if installedSignatures {
            archive.plan(signatureSpans, gap: RangedInput.signatureGapLimit, exactGap: RangedInput.signatureGapLimit)
        } else {
            signatureSpans += reusedSignatureSpans
            reusedSignatureSpans = []
            archive.plan(signatureSpans, exactGap: RangedInput.signatureGapLimit)
        }
        planned = (spans + signatureSpans).reduce(0) { $0 &+ UInt64($1.count) } &+ input.bytesReceived
    }

    /// Whether the `index`th resource comes from what is already here (the installed tree, an
    /// earlier run's staging, or a chunk rebuild) rather than fetched whole.
    func reuses(_ index: Int) -> Bool {
        guard index < origins.count, case .fetch = origins[index] else { return index < origins.count }
        return false
    }

    /// The bytes of `file`'s signature entry.
    private func signatureSpan(of file: Manifest.File, job: Installer.Job) -> Range<Int64>? {
        guard let entry = job.layout.signature(file.path), let span = job.reader.span(of: entry) else { return nil }
        return Int64(span.lowerBound)..<Int64(span.upperBound)
    }

    /// A reused file's own signature (its `user.signet.sig`, on `fd`), when it may stand for the
    /// package's entry and verifies over `digest` with the manifest's key; nil otherwise. The
    /// first that does not verify ends the shortcut: the rest are read from the package, their
    /// entries planned now in a few requests.
    private func installedSignature(_ fd: FileDescriptor, digest: Digest, checked: PackageReader.Checked) -> [UInt8]? {
        guard installedSignatures else { return nil }
        if case .success(let signature?) = ExtendedAttributes.get(ExtendedAttributes.signature, on: fd),
            signature.count == checked.key.signatureLength,
            Verifier.check(signature, digest: digest, key: checked.key, algorithm: checked.algorithm)
        {
            return signature
        }
        installedSignatures = false
        archive.plan(reusedSignatureSpans, exactGap: RangedInput.signatureGapLimit)
        planned = planned.map { $0 &+ reusedSignatureSpans.reduce(0) { $0 &+ UInt64($1.count) } }
        reusedSignatureSpans = []
        return nil
    }

    /// The file bytes of `file`'s entry.
    func span(of file: Manifest.File, job: Installer.Job) -> Range<Int64>? {
        guard let entry = job.layout.resource(file.path), let span = job.reader.span(of: entry) else { return nil }
        return Int64(span.lowerBound)..<Int64(span.upperBound)
    }

    /// Stages `file` from the installed tree (copied and hashed in one pass), or checks the copy
    /// an earlier run staged (hashed where it is). Nil when that copy is missing or is not the
    /// signed content: the caller then fetches the entry (planned here).
    func copy(
        _ file: Manifest.File, index: Int, job: Installer.Job, into staging: Staging, checked: PackageReader.Checked,
        later: ((_ signature: [UInt8], _ digest: Digest) -> Void)?
    ) throws -> Installer.Job.Staged? {
        let origin = index < origins.count ? origins[index] : .fetch
        let staged: Installer.Job.Staged?
        switch origin {
        case .fetch: staged = nil
        case .continued(let data, let from):
            if let done = try job.stageContinued(file, data: data, from: from, input: archive, into: staging, checked: checked, later: later) {
                fetched += 1
                bytesFetched &+= file.size - from
                fileBytesResumed &+= from
                return done
            }
            staged = nil
        case .rebuild(let plan):
            let before = chunkCounts
            if let rebuilt = try job.stageRebuilt(
                file, plan: plan, from: root?.descriptor, input: archive, into: staging, checked: checked,
                counts: &chunkCounts, later: later)
            {
                fetched += 1
                bytesFetched &+= chunkCounts.bytesFetched - before.bytesFetched
                return rebuilt
            }
            chunkCounts = before
            staged = nil
        case .installed:
            let own = { (fd: FileDescriptor, digest: Digest) in self.installedSignature(fd, digest: digest, checked: checked) }
            if let root, let shared = try job.stageShared(file, from: root.descriptor, into: staging, checked: checked, later: later, ownSignature: own) {
                staged = shared
                linked += 1
            } else {
                staged = try job.stageCopy(file, from: root?.descriptor, into: staging, checked: checked, later: later, ownSignature: own)
            }
        case .staged(let unchanged):
            staged = try job.stageCopy(
                file, from: nil, inPlace: true, into: staging, checked: checked, later: later,
                ownSignature: { self.installedSignature($0, digest: $1, checked: checked) })
            // An unchanged file the earlier run shared with DIR (a hard link) is reported as
            // shared, as it is on disk, not as copied.
            if unchanged, staged != nil, sharesInode(file.path, staging: staging) { linked += 1 }
        }
        if let staged {
            if case .staged(unchanged: false) = origin { resumed += 1 } else { reusedCount += 1 }
            return staged
        }
        fetchInstead(file, job: job)
        return nil
    }

    /// Whether the staged `relative` file is DIR's own file at the same path (one inode: a hard
    /// link an earlier run made), read without following a link at the end.
    private func sharesInode(_ relative: String, staging: Staging) -> Bool {
        guard let root else { return false }
        var installed = stat(), staged = stat()
        guard fstatat(root.descriptor.rawValue, relative, &installed, AT_SYMLINK_NOFOLLOW) == 0,
            lstat(staging.path + "/" + relative, &staged) == 0
        else { return false }
        return installed.st_dev == staged.st_dev && installed.st_ino == staged.st_ino
    }

    /// Counts a resource read from the package, planning its entry if it was not.
    func fetchInstead(_ file: Manifest.File, job: Installer.Job) {
        if let span = span(of: file, job: job) {
            archive.plan([span])
            planned = planned.map { $0 &+ UInt64(span.count) }
        }
    }

    /// Counts what was fetched (called as each fetched resource is staged).
    func countFetched(_ file: Manifest.File) {
        fetched += 1
        bytesFetched &+= file.size
    }
}

extension Installer.Job {
    /// Stages `file` from the installed tree below `root` (a file, never through a link, never
    /// out of the tree): copied and hashed in one pass, with the structured copy where the
    /// manifest asks for one. With `inPlace`, the file is the one an earlier run staged and
    /// ``Staging/moveIn(_:from:size:)`` brought: hashed where it is, nothing copied.
    /// `ownSignature` may give the file's signature from its own attributes, verified with the
    /// manifest's key over the file's digest, instead of the package's entry. Nil, with
    /// nothing staged, when the file is absent, not a regular file, unreadable, or not exactly
    /// the signed content.
    func stageCopy(
        _ file: Manifest.File, from root: FileDescriptor?, inPlace: Bool = false, into staging: Staging, checked: PackageReader.Checked,
        later: ((_ signature: [UInt8], _ digest: Digest) -> Void)?,
        ownSignature: (_ file: FileDescriptor, _ digest: Digest) -> [UInt8]? = { _, _ in nil }
    ) throws -> Staged? {
        let copyPath = file.structured != nil ? TreeLayout.structuredCopy(of: file.path) : nil
        var kept = false
        defer {
            if !kept {
                staging.removeFile(file.path)
                if let copyPath { staging.removeFile(copyPath) }
            }
        }
        var installed: InputFile? = nil
        if !inPlace {
            guard let root, let opened = try? Paths.open(file.path, beneath: root),
                let input = try? InputFile.adopt(opened, path: destination + "/" + file.path, what: "installed file")
            else { return nil }
            installed = input
        }
        let staged = if inPlace { try staging.openFile(file.path) } else { try staging.createFile(file.path, mode: mode_t(file.mode.permissions)) }
        let fd = staged.descriptor
        let source =
            try installed
            ?? InputFile.adopt(
                OwnedDescriptor(adopting: try systemCall("dup") { dup(fd.rawValue) }),
                path: staging.path + "/" + file.path, what: "staged file")
        if inPlace, options.imaAttribute == nil {
            // Written by an earlier run, perhaps with --ima: an IMA attribute this install does
            // not ask for is not left behind.
            for name in [IMASignature.userAttribute, IMASignature.securityAttribute] { _ = ExtendedAttributes.remove(name, on: fd) }
        }
        guard source.size == Int64(file.size) else { return nil }
        var stagedCopy: OwnedDescriptor? = nil
        if let copyPath { stagedCopy = try staging.createFile(copyPath, mode: 0o644) }
        let copyFD = stagedCopy?.descriptor
        let writer = Installer.StagedWriter(fd: fd, path: file.path, destination: destination)
        let copy = copyFD.map { Installer.StagedWriter(fd: $0, path: copyPath!, destination: destination) }
        let hashers = try ContentHashers(for: file, algorithm: checked.algorithm)
        /// The installed file grew while it was read: not the signed content.
        struct Longer: Error {}
        var total: UInt64 = 0
        // A reflink where the filesystem has them: the staged file shares the installed one's
        // data, and is hashed through its own descriptor, so what is hashed is what is installed.
        let cloned = !inPlace && signet_clone_file(fd.rawValue, source.descriptor.rawValue) == 0
        let written = !inPlace && !cloned
        do {
            let reader =
                cloned
                ? try InputFile.adopt(
                    OwnedDescriptor(adopting: try systemCall("dup") { dup(fd.rawValue) }), path: staging.path + "/" + file.path, what: "staged copy") : source
            try reader.forEachChunk { chunk in
                total += UInt64(chunk.count)
                guard total <= file.size else { throw Longer() }
                try hashers.update(chunk)
                if written { try writer.write(chunk) }
                try copy?.write(chunk)
            }
        } catch is Longer {
            return nil
        } catch let error as SignetError where error.path == source.path {
            return nil // unreadable where it is installed: fetched instead
        }
        // Not the signed content (or a wrong fs-verity digest, which the entry's check then
        // names): fetched instead.
        guard total == file.size, case .signed(let digest) = try hashers.finish() else { return nil }
        // The file's own signature where it may stand for the package's entry (not fetched;
        // verified already, so not checked again).
        let signature = try reusedSignature(file, own: ownSignature(source.descriptor, digest), digest: digest, checked: checked, later: later)
        let finished = try finishStaged(
            file, fd: fd, writer: writer, copy: copyFD.map { ($0, copy!) }, signature: signature, sha256: file.sha256,
            signer: checked.key, checked: checked, into: staging, exactMode: inPlace)
        kept = true
        return finished
    }
}

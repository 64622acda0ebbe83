#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore
import SignetCrypto
import SignetManifest
import SignetPackage

extension Installer {
    /// What phase 1 decided: install (with what it established), or nothing to do.
    enum Admission {
        /// DIR already holds this release, whole: the report of the run that wrote nothing.
        case upToDate(InstallReport)
        case install(Admitted)
    }

    /// What phase 1 established before anything is written.
    struct Admitted {
        /// The verified manifest, its bytes and key; nil for a bare package.
        var checked: PackageReader.Checked?
        /// The state file (`--state`), locked until the new sequence is recorded.
        let installState: InstallState?
        /// The release record beside DIR as read.
        var releases: ReleaseRecord
        /// SHA-256 (hex) of the manifest's bytes.
        let manifestDigest: String?
        /// This boot's id, for `--pending` (read before anything is written).
        let bootID: String
        /// With `--repair`: what the installed tree of the same release had wrong.
        let repaired: [String]
    }

    /// What phase 2 staged: the new tree, whole and durable, beside DIR.
    struct StagedTree {
        let staging: Staging
        let files: [String]
        let signer: PublicKey
        let attributesWritten: Bool
        let progress: ProgressCounter?
        /// The installed tree as a source (a package file): how many files it shared and copied.
        let shared: SharedTree?
        /// fs-verity (``VerityStep``): files enabled, or why it was not used.
        var verityEnabled = 0
        var verityNotUsed: String? = nil
    }

    // MARK: Phase 1

    /// Phase 1: the manifest and the rules an install is held to, before anything is written —
    /// the signature and expiry, the rollback rules (DIR's sequence, the state file's, the
    /// releases DIR refused), the binding to signed metadata, a sealed DIR, case collisions.
    /// Ends the install early when DIR holds this release whole (a health check that never
    /// finished runs again).
    static func admit(_ job: Job, state: DestinationState, stale: [String], ranged: RangedUpdate?) throws -> Admission {
        let (package, destination, options) = (job.package, job.destination, job.options)
        // A hook an earlier Signet was killed in, still running, is ended first (FORMAT §2).
        Self.endLeftoverHook(destination)
        let (checked, installState) = try job.checkManifest(replacing: state)
        if let expected = options.expectedPackage {
            do { try Self.checkBinding(expected, checked: checked, package: package) } catch { throw loggedRefusal(error, options: options) }
        }
        if let required = options.requiredManifestSHA256 { try Self.checkConfirmed(required, checked: checked, package: package) }
        try Self.checkSeal(of: destination, replacedBy: job.resources(checked).map(\.path), options: options, package: package)
        if options.caseInsensitiveDestination || CaseFolding.ignoresCase(at: AtomicFile.parentDirectory(of: destination)) {
            try CaseFolding.refuseCollisions(job.resources(checked).map(\.path), package: package)
        }

        // The release DIR already holds: nothing to write, unless asked to reinstall or to
        // repair a tree that no longer checks whole.
        var repaired: [String] = []
        if let checked, !options.force, case .installed(let installed?) = state, Self.sameRelease(installed, checked, at: destination) {
            if options.repair {
                repaired = try Self.damage(of: destination, policy: job.policy)
            }
            if repaired.isEmpty {
                if let installState, (installState.destination(destination)?.sequence ?? 0) < installed.sequence {
                    try installState.record(checked.manifest.name, sequence: checked.manifest.sequence, destination: destination, changedFrom: nil)
                }
                var report = InstallReport(
                    destination: destination, manifest: checked.manifest, files: [], signer: checked.key,
                    replacedSequence: nil, attributesWritten: true, exchanged: false,
                    leftover: stale.first, transfer: ranged?.report)
                report.upToDate = true
                // A post-install command or a health check that never finished (Signet was
                // killed in it): what it left running is ended, and it runs again now.
                let releases = try ReleaseRecord.read(for: destination)
                if (options.hooks.healthCheck != nil && releases.unchecked == installed.sequence)
                    || (options.hooks.postInstall != nil && releases.post_install?.sequence == installed.sequence)
                {
                    report.pending = releases.pending?.sequence == installed.sequence
                    try Self.runHooks(&report, old: try? Self.status(of: destination).previous, options: options, installState: installState, recheck: true)
                }
                return .upToDate(report)
            }
        }

        // A release this destination refused (a failed health check, a rollback) is not
        // installed again; a higher sequence is (--retry-bad overrides).
        let releases = try ReleaseRecord.read(for: destination)
        if let checked, !options.retryBad,
            let bad = releases.isBad(checked.manifest.name, sequence: checked.manifest.sequence, installed: Self.release(of: state)?.sequence)
        {
            throw SignetError(
                .badRelease,
                "\(checked.manifest.name) sequence \(checked.manifest.sequence) is a release '\(destination)' refused (\(bad.sequences.map { "installed here and refused: sequence\($0.count == 1 ? "" : "s") \($0.map(String.init).joined(separator: ", "))" } ?? "sequence \(bad.sequence) and lower"): \(bad.reason), \(bad.at)); nothing was installed. A higher sequence installs; --retry-bad installs this one anyway",
                path: package)
        }
        return .install(
            Admitted(
                checked: checked, installState: installState, releases: releases,
                manifestDigest: try checked.map { try Digest.compute($0.manifestBytes, algorithm: .sha256).hex },
                // --pending records this boot's id: read before anything is written.
                bootID: options.pending ? try ReleaseRecord.bootID() : "",
                repaired: repaired))
    }

    // MARK: Phase 2

    /// Phase 2: every resource, verified while it is staged into a private directory beside DIR
    /// (each from the first ``ResourceSource`` that holds it), the tree's records, then the
    /// whole tree made durable. On failure the staging is removed — except over ranges after a
    /// transfer failed, when what was fetched is kept for the next run (FORMAT.md §5).
    static func stageResources(_ job: Job, admitted: inout Admitted, state: DestinationState, ranged: RangedUpdate?) throws -> StagedTree {
        let (package, destination, options) = (job.package, job.destination, job.options)
        let staging = try Staging(besides: destination)
        // Over ranges, what was fetched survives an interruption as it survives a cut link or
        // a SIGKILL: the next run takes the tree over and continues in it (FORMAT §5).
        if ranged != nil { staging.keepOnInterruption() }
        var done = false
        var keepForNextRun = false
        defer { if !done && !keepForNextRun { _ = staging.remove() } }
        // The verified manifest's bytes go into the staged tree now rather than being held to
        // the end (8.7 MiB of a 50,000-file package's peak).
        if let bytes = admitted.checked?.manifestBytes {
            admitted.checked?.manifestBytes = []
            try staging.writeFile(TreeLayout.manifest, bytes)
        }
        let checked = admitted.checked
        let verity = try VerityStep.decide(options.verity, manifest: checked?.manifest, staging: staging, package: package, destination: destination)
        var signer = checked?.key
        var attributesWritten = true
        var files: [String] = []
        // Every signature, in manifest order, in one file (not a sidecar file per resource).
        let record = try checked.map {
            try SignatureRecord.Writer(
                file: try staging.createFile(TreeLayout.signatureRecord), path: staging.path, length: $0.key.signatureLength, digest: $0.algorithm.digest)
        }
        let resources = job.resources(checked)
        // Over ranges: which files the installed tree already holds (copied, not fetched).
        try ranged?.prepare(resources, manifest: checked?.manifest, job: job, state: state, staging: staging, algorithm: checked?.algorithm)
        // From a package file: the unchanged files come from the installed tree (shared, else
        // copied) rather than from the package.
        let shared = ranged == nil && checked != nil && !options.force ? SharedTree(destination: destination, state: state) : nil
        // --repair: what its check found wrong is read whole again, never taken on measurement.
        shared?.damaged = Set(admitted.repaired.map { line in line.range(of: ": ", options: .backwards).map { String(line[..<$0.lowerBound]) } ?? line })
        let sources = ResourceSources(ranged: ranged, shared: shared)
        let progress = ProgressCounter.make(options.progress, items: resources.count, bytes: resources.reduce(0) { $0 &+ $1.size })
        // Each resource's signature is verified on the second core while the next ones stage;
        // all of them before anything is installed, and the first failure in manifest order is
        // the one reported, as when each is checked in turn.
        let signatures = checked.map { SignatureChecks(key: $0.key, algorithm: $0.algorithm) }
        func firstBadSignature() -> SignetError? {
            signatures?.firstRejection().map { Self.error(for: $0.failure, $0.message, package: package, entry: $0.entry) }
        }
        do {
            for (index, file) in resources.enumerated() {
                let later = signatures.map { checks in { checks.submit(index: index, file: file, signature: $0, digest: $1) } }
                let context = StagingContext(job: job, staging: staging, checked: checked, signer: signer, progress: progress, later: later)
                let staged = try sources.stage(file, index: index, in: context)
                progress?.add(items: 1)
                signer = signer ?? staged.signer
                attributesWritten = attributesWritten && staged.attributesWritten
                try record?.append(staged.signature)
                files.append(file.path)
            }
        } catch {
            if let bad = firstBadSignature() { throw bad }
            if let ranged, var failure = error as? SignetError, failure.code == .network || failure.code == .packageChanged || failure.code == .interrupted {
                // What is staged is kept: the next attempt (this run's, after a package that
                // changed on the server, or the next run's) continues in it — also after an
                // interruption (SIGINT, SIGTERM: a systemd stop), which first let this run write
                // what had arrived (FORMAT §5).
                keepForNextRun = true
                ranged.leftovers.adopt(staging.path)
                if failure.code == .network || failure.code == .interrupted {
                    failure.reason += "; what was fetched is kept beside '\(destination)' for the next run, which fetches only the rest"
                }
                if failure.code == .interrupted { Self.parkForInterruption() }
                throw failure
            }
            throw error
        }
        if let failure = firstBadSignature() { throw failure }
        guard let signer else { throw SignetError(.malformedArchive, "'\(package)' holds no resources; nothing was installed", path: package) }
        var verityEnabled = 0
        if case .enable = verity, let checked {
            verityEnabled = try VerityStep.enable(checked.manifest.files, in: staging, package: package, destination: destination)
        }
        if let checked {
            try record?.finish()
            try job.checkRecordSignature(checked, digest: record?.digest, into: staging)
            try job.stageRecord(checked, into: staging)
        } else {
            // A bare tree: marked, so that reverify and the next unpack know it as Signet's.
            try staging.writeFile(TreeLayout.bareMarker, Array("signet-bare/1\n".utf8))
        }
        try staging.finish()
        done = true
        var verityNotUsed: String? = nil
        if case .notUsed(let reason) = verity { verityNotUsed = reason }
        return StagedTree(
            staging: staging, files: files, signer: signer, attributesWritten: attributesWritten,
            progress: progress, shared: shared, verityEnabled: verityEnabled, verityNotUsed: verityNotUsed)
    }

    /// Once an interruption asked a ranged run to keep what it has and it has: told to the
    /// signal-handling thread, which ends the process; this thread writes nothing more.
    static func parkForInterruption() {
        guard TemporaryFiles.isDraining else { return }
        TemporaryFiles.markParked()
        while true { pause() }
    }

    // MARK: Phase 3

    /// Phase 3: the staged tree swapped with DIR in one step (the old tree kept as the previous
    /// release, or removed), then the records of what was installed — the release record
    /// beside DIR, the state file — and the hooks. The release record says pending or unchecked
    /// before the swap, so that a power cut after it never leaves a release confirmed that was
    /// not. If the swap fails, DIR and its record are as they were and the staging is removed.
    static func swap(
        _ staged: StagedTree, job: Job, admitted: Admitted, state: DestinationState, stale: [String],
        ranged: RangedUpdate?, preInstall: HookResult? = nil
    ) throws -> InstallReport {
        let (destination, options) = (job.destination, job.options)
        // An interruption that let a ranged run keep what it fetched: the tree it staged whole
        // is kept for the next run too, not swapped in while the process is being stopped.
        if let ranged, TemporaryFiles.isDraining {
            ranged.leftovers.adopt(staged.staging.path)
            parkForInterruption()
        }
        let (checked, installState) = (admitted.checked, admitted.installState)
        var releases = admitted.releases
        let staging = staged.staging
        var installed = false
        defer { if !installed { _ = staging.remove() } }
        let previous = Self.previousPolicy(options: options, state: state, releases: releases, checked: checked, digest: admitted.manifestDigest)
        let pendingBefore = releases.pending
        if options.pending, let checked {
            // Recorded before the swap, so that a power cut right after it leaves the new
            // release pending, not confirmed (a pending sequence DIR does not hold is ignored).
            releases.pending = .init(sequence: checked.manifest.sequence, boot_id: admitted.bootID, since: Timestamp.now.rfc3339)
        }
        // With a health check, the new release is unchecked from before the swap until the
        // check passes: a process killed anywhere after the swap (in the post-install command
        // too) leaves it to be checked by the next run, never confirmed (FORMAT §2, "Hooks").
        let uncheckedBefore = releases.unchecked
        if options.hooks.healthCheck != nil, let checked { releases.unchecked = checked.manifest.sequence }
        if releases.pending != pendingBefore || releases.unchecked != uncheckedBefore { try releases.write(for: destination) }
        let exchanged: Bool, kept: Bool
        do {
            (exchanged, kept) = try staging.install(at: destination, replacing: state, previous: previous)
        } catch {
            // DIR is as it was: so is what the record says of it (a release of DIR's that was
            // pending stays pending).
            if releases.pending != pendingBefore || releases.unchecked != uncheckedBefore {
                releases.pending = pendingBefore
                releases.unchecked = uncheckedBefore
                try? releases.write(for: destination)
            }
            throw error
        }
        installed = true
        let old = Self.release(of: state)
        if checked != nil {
            releases.record(
                installed: admitted.manifestDigest, signer: checked?.key,
                pending: releases.pending?.sequence == checked?.manifest.sequence ? releases.pending : nil,
                kept: kept, previous: previous)
            try releases.write(for: destination)
        }
        let leftover = staging.removeReplaced()
        staged.progress?.finish()
        if let installState {
            let before = installState.destination(destination)?.name ?? state.installedName
            let changedFrom = options.changePackage && before != nil && !Manifest.sameName(before, checked?.manifest.name) ? before : nil
            try installState.record(checked?.manifest.name, sequence: checked?.manifest.sequence, destination: destination, changedFrom: changedFrom)
        }
        var replaced: UInt64? = nil
        if case .installed(let manifest?) = state { replaced = manifest.sequence }
        var report = InstallReport(
            destination: destination, manifest: checked?.manifest, files: staged.files, signer: staged.signer,
            replacedSequence: replaced, attributesWritten: staged.attributesWritten, exchanged: exchanged,
            leftover: leftover ?? stale.first, transfer: ranged?.report)
        report.repaired = admitted.repaired
        report.verityEnabled = staged.verityEnabled
        report.verityNotUsed = staged.verityNotUsed
        report.filesShared = (ranged?.linked ?? 0) + (staged.shared?.linked ?? 0)
        report.filesCopied = max(0, (ranged?.report.filesReused ?? 0) - (ranged?.linked ?? 0)) + (staged.shared?.copied ?? 0)
        report.previousKept = kept
        report.pending = releases.pending != nil
        // The pre-install command that said yes, first among the hooks the report lists.
        if let preInstall { report.hooks.append(preInstall) }
        try Self.runHooks(&report, old: old, options: options, installState: installState)
        return report
    }
}

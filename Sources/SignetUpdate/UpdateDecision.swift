import SignetCore
import SignetManifest
import SignetInstall
import SignetTUF

/// "Install a release? Which one?" — decided once per update, as a pure function of the trusted
/// listing (one package name's releases in the channel), what DIR holds and its records, the
/// device's options and the clock (FORMAT.md §7, "Which release a device installs"). The
/// updater reads DIR and its records once, under DIR's lock, decides, and acts on the answer
/// under the same lock; the report is built from the answer in one place
/// (``TUFUpdateReport/init(decision:refresh:role:packageURL:installed:install:deferredInstall:)``).
package struct UpdateDecision: Sendable, Equatable {
    /// What this run does.
    package enum Action: Sendable, Equatable {
        /// Installs ``UpdateDecision/release`` (newer, or the held release re-signed).
        case install
        /// Installs the release DIR holds again (`--repair`, or a hook left unfinished).
        case repair
        /// The release is one DIR refused as bad: held back, not an error (`--retry-bad`).
        case refusedBad(RefusedRelease)
        /// Nothing to install (up to date, held, deferred by its rollout or lock, a check).
        case none
    }

    /// What the device's options say about the choice (a subset of ``TUFUpdateOptions``).
    package struct Options: Sendable, Equatable {
        var hold = false
        var ignoreRollout = false
        var versionLock: VersionLock? = nil
        var repair = false
        var retryBad = false
        /// Whether a post-install command and a health check are configured: a hook that
        /// never finished for the installed release runs again.
        var postInstallHook = false
        var healthCheckHook = false

        package init() {}

        package init(_ options: TUFUpdateOptions) {
            hold = options.hold
            ignoreRollout = options.ignoreRollout
            versionLock = options.versionLock
            repair = options.install.repair
            retryBad = options.install.retryBad
            postInstallHook = options.install.hooks.postInstall != nil
            healthCheckHook = options.install.hooks.healthCheck != nil
        }
    }

    /// A note for `status DIR`: the channel's newest release and why it is not installed
    /// (nil note: nothing held back).
    package struct ChannelNote: Sendable, Equatable {
        let sequence: UInt64
        let version: String
        let note: String?
    }

    package let action: Action
    /// The release the run acts on and reports: the one installed or repaired, or refused;
    /// else the newest listed.
    package let release: TUFPackageTarget
    /// Which listed release reaches this device, and why.
    package let choice: TUFReleaseChoice
    /// The channel names a newer release than DIR holds (installed or not).
    package let updateAvailable: Bool
    /// The channel names an older release than DIR holds (never installed).
    package let channelIsOlder: Bool
    /// The newest release's rollout for this device, when it is the one reported.
    package let rollout: RolloutStatus?
    /// Why a newer release is not installed (held, waiting for its wave, halted, locked).
    package let deferred: String?
    /// What to record for `status DIR` (nil: DIR holds no release, or the release is refused).
    package let channelNote: ChannelNote?

    /// Decides for `releases` (one name's, the channel's; at least one), DIR holding
    /// `installed` with `records`. `deviceID` is read only when a plan needs it. Nil when the
    /// channel lists no release.
    package static func decide(
        releases: [TUFPackageTarget], installed: InstalledRelease?, records: ReleaseRecord, options: Options,
        at now: Timestamp, deviceID: () throws -> [UInt8]
    ) throws -> UpdateDecision? {
        guard
            let choice = try TUFReleaseChoice.choose(
                among: releases, deviceID: deviceID, at: now,
                ignoreRollout: options.ignoreRollout, versionLock: options.versionLock)
        else { return nil }
        let newest = choice.newest
        let installedSequence = installed.flatMap { Manifest.sameName($0.name, newest.name) ? $0.sequence : nil }
        // The release DIR holds, re-signed since (a key rotation: the same sequence and files, a
        // new manifest): installed like a newer one, so the tree carries signatures the
        // device's keys verify; nothing is fetched but the package's own entries.
        let resigned = choice.chosen.flatMap { chosen -> TUFPackageTarget? in
            guard chosen.sequence == installedSequence, let held = records.current_manifest_sha256, held != chosen.manifestSHA256 else { return nil }
            return chosen
        }
        let newerChosen = choice.chosen.flatMap { chosen in installedSequence.map { chosen.sequence > $0 } ?? true ? chosen : nil } ?? resigned
        let listedInstalled = installedSequence.flatMap { sequence in releases.first { $0.sequence == sequence } }
        // A hook of the installed release that never finished (Signet was killed in it) runs
        // again: the install path finds DIR up to date, ends what the hook left and reruns it.
        let unfinished =
            (options.postInstallHook && records.post_install.map { $0.sequence == installedSequence } == true)
            || (options.healthCheckHook && records.unchecked != nil && records.unchecked == installedSequence)
        let repairing = (options.repair || unfinished) && newerChosen == nil && listedInstalled != nil
        let release = options.hold ? newest : (newerChosen ?? (repairing ? listedInstalled : nil) ?? newest)
        let newer = installedSequence.map { newest.sequence > $0 } ?? true
        let older = installedSequence.map { newest.sequence < $0 } ?? false
        let installing = !options.hold && (newerChosen != nil || repairing)
        // A release this device refused (a failed health check, a rollback) is not news every
        // hour: it is held back, and the run succeeds (--retry-bad installs it).
        if installing, !repairing, !options.retryBad,
            let bad = records.isBad(release.name, sequence: release.sequence, installed: installedSequence)
        {
            return UpdateDecision(
                action: .refusedBad(RefusedRelease(sequence: bad.sequence, reason: bad.reason, at: bad.at)), release: release,
                choice: choice, updateAvailable: false, channelIsOlder: false, rollout: nil, deferred: nil, channelNote: nil)
        }
        // The newest release's rollout for this device, and why it is not installed, when it
        // is newer than what DIR holds and this run does not install it.
        let rollout = choice.passedOver.first?.rollout ?? (choice.chosen?.target == newest.target ? choice.rollout : nil)
        var deferred: String? = nil
        if newer, newest.target != (installing ? release.target : nil) {
            if options.hold {
                deferred = "held: this device installs nothing new (hold)"
            } else if let passed = choice.passedOver.first {
                deferred = TUFUpdater.describe(passed, lock: options.versionLock)
            }
        }
        // What `status DIR` shows: why the channel's release is not installed, or that the
        // release DIR holds was halted.
        var channelNote: ChannelNote? = nil
        if installed != nil {
            let holds = listedInstalled?.rollout?.state == .halted ? listedInstalled : nil
            let halted =
                deferred == nil && !installing
                ? holds.map { "halted: the publisher halted the rollout of \($0.version) (sequence \($0.sequence)); this device keeps it" } : nil
            channelNote = ChannelNote(sequence: newest.sequence, version: newest.version, note: deferred ?? halted)
        }
        return UpdateDecision(
            action: installing ? (repairing ? .repair : .install) : .none, release: installing ? release : newest,
            choice: choice, updateAvailable: installing || newer, channelIsOlder: older, rollout: rollout,
            deferred: deferred, channelNote: channelNote)
    }
}

extension TUFUpdateReport {
    /// The report of an update: the one place it is built, from the decision and what the
    /// install did (`deferredInstall`: the install layer deferred it — outside the maintenance
    /// window, or the pre-install command said not now).
    init(
        decision: UpdateDecision, refresh: TUFRefreshReport, role: String, packageURL: String, installed: InstalledRelease?,
        install: InstallReport?, deferredInstall: String? = nil
    ) {
        self.init(
            refresh: refresh, release: decision.release, role: role, packageURL: packageURL, installed: installed,
            updateAvailable: decision.updateAvailable, channelIsOlder: decision.channelIsOlder, install: install)
        choice = decision.choice
        if case .refusedBad(let refused) = decision.action { self.refused = refused }
        rollout = decision.rollout
        deferred = deferredInstall ?? decision.deferred
    }
}

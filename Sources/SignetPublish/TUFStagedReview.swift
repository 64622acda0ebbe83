#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation
import SignetCore
import SignetTUF
import SignetCrypto
import SignetManifest
import SignetPackage

/// What a key holder is asked to sign: a staged root or targets version against the published
/// one, and what Signet found wrong with it (FORMAT.md §7, "Reviewing what you sign").
/// ``digest`` names exactly this content: ``TUFRepository/sign(_:with:reviewed:acceptUnrecognized:now:)``
/// refuses to sign anything else, so what a signer signs is what they saw.
public struct TUFStagedReview: Sendable {
    /// One target as a version lists it.
    public struct Target: Sendable, Equatable {
        public let path: String
        public let length: Int64
        /// Algorithm → hex.
        public let hashes: [String: String]
        /// The Signet package it binds (nil: not a Signet package target).
        public let package: TUFPackageTarget?
    }

    /// A target added, changed or removed by the staged version.
    public struct TargetChange: Sendable {
        /// `added`, `changed` or `removed`.
        public let change: String
        public let staged: Target?
        public let published: Target?
    }

    /// A top-level role whose keys or threshold the staged root changes.
    public struct RoleChange: Sendable {
        public let name: String
        public let keyIDs: [String]
        public let threshold: Int
        public let publishedKeyIDs: [String]
        public let publishedThreshold: Int
    }

    /// Something a signer should not sign unawares.
    public struct Problem: Sendable {
        /// `package` (a listed package does not match its file in targets/, or is not signed by
        /// a key of the role: never signable), `unrecognized` (a field Signet's publisher never
        /// writes: delegations, other hashes, unknown members) or `expires` (later than the
        /// role's lifetime allows): signable only when the signer accepts them.
        public let kind: String
        public let message: String
    }

    public let role: String
    public let version: Int64
    /// The published version it follows (0: none yet).
    public let publishedVersion: Int64
    /// SHA-256 (hex) of the canonical JSON of the staged `signed`: what every signature covers.
    public let digest: String
    public let expires: Timestamp?
    public let publishedExpires: Timestamp?
    /// TUF key ids with a signature on the staged file so far.
    public let signedBy: [String]
    public let targets: [TargetChange]
    /// Delegations the staged targets version adds, changes or removes, for a person.
    public let delegations: [String]
    public let roles: [RoleChange]
    public let problems: [Problem]
    /// For a staged root: the listed releases it strands (their package verifies with none of
    /// its targets keys) and what is done about each — re-signed in the staged targets, or the
    /// `signet repo resign` to run (FORMAT.md §7, "Rotating the targets keys").
    public var stranded: [String] = []
    /// What a signer should know but that does not stop the signature: a plan this version adds
    /// or changes whose given start lies in the past, so that it opens a share at once when it
    /// is published (FORMAT.md §7, "Rollouts").
    public var warnings: [String] = []
    /// TUF key id → the same key's Signet id (16 hex digits), for the keys this review names
    /// that Signet reads: people know a key by the id `keygen` and `key show` print.
    public var signetKeyIDs: [String: String] = [:]

    /// A key as the review shows it: its Signet id with the TUF id, or the TUF id alone.
    func shown(_ tufID: String) -> String {
        signetKeyIDs[tufID].map { "\($0) (TUF \(tufID.prefix(12)))" } ?? "TUF \(tufID.prefix(12))"
    }

    /// Whether `given` (at least 16 hex digits, any case) names this review's digest.
    public func matches(_ given: String) -> Bool {
        let text = given.lowercased()
        return text.count >= 16 && text.count <= 64 && text.allSatisfy(\.isHexDigit) && digest.hasPrefix(text)
    }

    /// The review as lines for a person (what `repo status` and `repo sign` print).
    public var lines: [String] {
        var out = ["staged \(role) v\(version) (published: \(publishedVersion == 0 ? "none" : "v\(publishedVersion)")), digest \(digest)"]
        out.append("  expires \(expires?.rfc3339 ?? "?")\(publishedExpires.map { " (published: \($0.rfc3339))" } ?? "")")
        out.append("  signed by \(signedBy.isEmpty ? "nobody yet" : signedBy.map(shown).joined(separator: ", "))")
        func describe(_ target: Target) -> String {
            if let package = target.package {
                return
                    "\(target.path): \(package.name) \(package.version) (sequence \(package.sequence)), channels \(package.channels.isEmpty ? "none" : package.channels.joined(separator: ", ")), \(target.length) bytes, sha256 \(target.hashes["sha256"] ?? "none"), manifest sha256 \(package.manifestSHA256)"
                    + (package.rollout.map { ", rollout \(TUFRollout.describe($0))" } ?? "")
            }
            return
                "\(target.path): \(target.length) bytes, \(target.hashes.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")) (not a Signet package)"
        }
        for change in targets {
            switch change.change {
            case "added": out.append("  + \(describe(change.staged!))")
            case "removed": out.append("  - \(describe(change.published!))")
            default:
                out.append("  ~ \(describe(change.staged!))")
                out.append("      was \(describe(change.published!))")
            }
        }
        if role == "targets", targets.isEmpty { out.append("  targets unchanged") }
        for delegation in delegations { out.append("  delegation: \(delegation)") }
        for change in roles {
            let before =
                change.publishedKeyIDs.isEmpty ? "none" : "\(change.publishedThreshold) of \(change.publishedKeyIDs.map(shown).joined(separator: ", "))"
            out.append("  role \(change.name): \(change.threshold) of \(change.keyIDs.map(shown).joined(separator: ", ")) (published: \(before))")
        }
        if role == "root", roles.isEmpty { out.append("  keys and thresholds unchanged") }
        for problem in problems { out.append("  PROBLEM (\(problem.kind)): \(problem.message)") }
        for release in stranded { out.append("  STRANDS: \(release)") }
        for warning in warnings { out.append("  WARNING: \(warning)") }
        return out
    }
}

extension TUFRepository {
    /// The review of the staged `role` (`root` or `targets`), nil when none is staged: the staged
    /// file against the newest published one, every package it adds or changes checked again
    /// against its file in `targets/` (length, SHA-256, manifest SHA-256, name, sequence, signed
    /// by a key of the role that lists it), and every field Signet's publisher never writes.
    public func review(_ role: String, now: Timestamp = .now) throws -> TUFStagedReview? {
        guard role == "root" || role == "targets" else {
            throw SignetError(.usage, "only root and targets are staged for signatures, not '\(role)'")
        }
        guard let document = try staged(role) else { return nil }
        let published = try latest(role).map { try TUFDocument(bytes: $0.bytes, name: "\($0.version).\(role).json") }
        var problems: [TUFStagedReview.Problem] = []
        func unrecognized(_ message: String) { problems.append(.init(kind: "unrecognized", message: message)) }
        let digest = try Digest.compute(document.signed.canonical, algorithm: .sha256).hex
        let expires = document.signed["expires"]?.stringValue.flatMap(Timestamp.init(rfc3339:))
        if let expires, expires.secondsSinceEpoch > now.secondsSinceEpoch &+ lifetimes.seconds(role) &+ 86_400 {
            problems.append(
                .init(
                    kind: "expires",
                    message: "it expires \(expires.rfc3339), later than the \(role) role's lifetime (\(lifetimes.seconds(role) / 86_400) days) allows from now")
            )
        }
        let topLevel: Set<String> =
            role == "root"
            ? ["_type", "spec_version", "version", "expires", "consistent_snapshot", "keys", "roles"]
            : ["_type", "spec_version", "version", "expires", "targets"]
        // custom.signet.tlog: the transparency policy `signet log init` stages (FORMAT §10).
        if role == "root", let custom = document.signed["custom"] {
            let members = custom.objectMembers ?? []
            let signet = custom["signet"]?.objectMembers ?? []
            if members.map(\.0) != ["signet"] || signet.map(\.0) != ["tlog"] {
                unrecognized("its 'custom' holds more than signet.tlog (the transparency policy), which is all signet repo writes there")
            } else if let text = custom["signet"]?["tlog"]?.stringValue {
                do { _ = try TransparencyPolicy(text: text) } catch let error as SignetError {
                    unrecognized("its transparency policy (custom.signet.tlog) does not read: \(error.reason)")
                }
            } else {
                unrecognized("its custom.signet.tlog is not a string (a transparency policy)")
            }
        }
        for (name, _) in document.signed.objectMembers ?? [] where !topLevel.contains(name) && !(role == "root" && name == "custom") {
            unrecognized(
                name == "delegations"
                    ? "it delegates to other roles ('delegations'), which signet repo never writes"
                    : "its 'signed' holds '\(name)', which signet repo never writes")
        }
        var targetChanges: [TUFStagedReview.TargetChange] = []
        var delegations: [String] = []
        var roleChanges: [TUFStagedReview.RoleChange] = []
        if role == "targets" {
            let stagedTargets = try Self.targets(of: document, unrecognized: unrecognized)
            let publishedTargets = try published.map { try Self.targets(of: $0, unrecognized: { _ in }) } ?? [:]
            for path in Set(stagedTargets.keys).union(publishedTargets.keys).sorted() {
                switch (stagedTargets[path], publishedTargets[path]) {
                case (let staged?, nil): targetChanges.append(.init(change: "added", staged: staged, published: nil))
                case (nil, let old?): targetChanges.append(.init(change: "removed", staged: nil, published: old))
                case (let staged?, let old?) where staged != old: targetChanges.append(.init(change: "changed", staged: staged, published: old))
                default: break
                }
            }
            // Before the first root is published (right after `repo init`) nothing can be listed.
            let root = try? effectiveRoot()
            let keys = (root?.roles["targets"]?.keyIDs ?? []).compactMap { root?.keys[$0]?.publicKey(source: "targets key \($0.prefix(16))") }
            // Added packages, and changed ones whose binding changed (a channel moved away from
            // an old release is not a new package: it was checked when it was listed).
            for change in targetChanges {
                guard let target = change.staged, let package = target.package else { continue }
                if let old = change.published, old.length == target.length, old.hashes == target.hashes,
                    let before = old.package, before.manifestSHA256 == package.manifestSHA256,
                    Manifest.sameName(before.name, package.name), before.sequence == package.sequence
                {
                    continue
                }
                if let wrong = checkPackage(target, package, keys: keys, now: now) { problems.append(.init(kind: "package", message: wrong)) }
            }
            let before = published?.signed["delegations"]?.canonical
            let after = document.signed["delegations"]?.canonical
            if before != after {
                let roles =
                    document.signed["delegations"]?["roles"]?.arrayItems?.compactMap { item -> String? in
                        guard let name = item["name"]?.stringValue else { return nil }
                        let paths = item["paths"]?.arrayItems?.compactMap(\.stringValue).joined(separator: " ") ?? "hash prefixes"
                        let ids = item["keyids"]?.arrayItems?.compactMap { $0.stringValue.map { String($0.prefix(12)) } }.joined(separator: " ") ?? ""
                        return "'\(name)' for \(paths), \(item["threshold"]?.integerValue ?? 0) of \(ids)"
                    } ?? []
                delegations.append(
                    after == nil ? "all delegations removed" : "staged delegations: \(roles.isEmpty ? "succinct hash bins" : roles.joined(separator: "; "))")
            }
        } else {
            let staged = try TUFRoot(document.metadata(as: "root", name: "staging/root.json"))
            let old = try published.map { try TUFRoot($0.metadata(as: "root", name: "published root")) }
            for name in ["root", "targets", "snapshot", "timestamp"] {
                guard let now = staged.roles[name] else { continue }
                let before = old?.roles[name]
                if before?.keyIDs != now.keyIDs || before?.threshold != now.threshold {
                    roleChanges.append(
                        .init(
                            name: name, keyIDs: now.keyIDs, threshold: now.threshold,
                            publishedKeyIDs: before?.keyIDs ?? [], publishedThreshold: before?.threshold ?? 0))
                }
            }
            for (id, key) in document.signed["keys"]?.objectMembers ?? [] {
                for (field, value) in key.objectMembers ?? []
                where !["keytype", "scheme", "keyval"].contains(field) || (field == "keyval" && (value.objectMembers?.map(\.0) ?? []) != ["public"]) {
                    unrecognized(
                        "key \(id.prefix(12)) has '\(field)' \(field == "keyval" ? "members other than 'public'" : ""), which signet repo never writes")
                }
            }
            for (name, value) in document.signed["roles"]?.objectMembers ?? [] {
                for (field, _) in value.objectMembers ?? [] where !["keyids", "threshold"].contains(field) {
                    unrecognized("role \(name) has '\(field)', which signet repo never writes")
                }
            }
            if document.signed["consistent_snapshot"]?.boolValue != true {
                unrecognized("'consistent_snapshot' is not true, which signet repo always writes")
            }
        }
        let published0 = published?.version ?? 0
        // Every key the published and staged roots name, by its Signet id too.
        var keys = (try? publishedRoot())?.keys ?? [:]
        if let stagedRoot = try? staged("root").flatMap({ try TUFRoot($0.metadata(as: "root", name: "staging/root.json")) }) {
            keys.merge(stagedRoot.keys) { old, _ in old }
        }
        var review = TUFStagedReview(
            role: role, version: document.version, publishedVersion: published0, digest: digest, expires: expires,
            publishedExpires: published?.signed["expires"]?.stringValue.flatMap(Timestamp.init(rfc3339:)),
            signedBy: document.signatures.map(\.keyID), targets: targetChanges, delegations: delegations,
            roles: roleChanges, problems: problems)
        for (id, _) in keys { if let signet = signetKeyID(id, in: keys) { review.signetKeyIDs[id] = signet } }
        if role == "root" { review.stranded = try strandedByStagedRoot(now: now).map { describe($0, underRoot: document.version) } }
        review.warnings = Self.pastStarts(targetChanges, now: now)
        return review
    }

    /// A warning for each plan the staged version adds or changes that counts from a given start
    /// already past: published, it opens at once the share its steps reached since then.
    static func pastStarts(_ changes: [TUFStagedReview.TargetChange], now: Timestamp) -> [String] {
        changes.compactMap { change -> String? in
            guard let package = change.staged?.package, let plan = package.rollout, plan.state == .active, plan.stagedAt == nil,
                plan.start.secondsSinceEpoch < now.secondsSinceEpoch, plan != change.published?.package?.rollout
            else { return nil }
            let open = plan.openBuckets(at: now)
            return
                "\(package.name) \(package.version) (\(change.staged?.path ?? "")): its plan counts from \(plan.start.rfc3339), which is past: published now, it opens \(TUFRollout.percent(open)) of devices at once, and more the longer the signatures take. To count from its publication, stage the plan again without a start (`signet repo rollout REPO RELEASE --plan \(plan.planText)`)"
        }
    }

    /// A version's targets, each with the Signet package it binds; fields Signet never writes
    /// are reported through `unrecognized`.
    private static func targets(of document: TUFDocument, unrecognized: (String) -> Void) throws -> [String: TUFStagedReview.Target] {
        var out: [String: TUFStagedReview.Target] = [:]
        for (path, value) in document.signed["targets"]?.objectMembers ?? [] {
            let target = try TUFTarget(path: path, json: value)
            let package = TUFPackageTarget(target)
            for (field, _) in value.objectMembers ?? [] where !["length", "hashes", "custom"].contains(field) {
                unrecognized("target '\(path)' has '\(field)', which signet repo never writes")
            }
            if target.hashes.keys.sorted() != ["sha256"] {
                unrecognized("target '\(path)' is bound by \(target.hashes.keys.sorted().joined(separator: ", ")), not by sha256 alone as signet repo writes")
            }
            let signet = value["custom"]?["signet"]
            if package == nil || (value["custom"]?.objectMembers?.count ?? 0) != 1
                || Set(signet?.objectMembers?.map(\.0) ?? []).subtracting(["rollout"]) != ["name", "version", "sequence", "manifest_sha256", "channels"]
            {
                unrecognized(
                    "target '\(path)' is not a Signet package as signet repo lists one (custom.signet with name, version, sequence, manifest_sha256, channels, a rollout if any, and nothing else)"
                )
            }
            if path.contains("/") { unrecognized("target '\(path)' has a folder in its path; signet repo names targets after the package file") }
            out[path] = .init(path: path, length: target.length, hashes: target.hashes, package: package)
        }
        return out
    }

    /// Why a listed package does not match its file in `targets/`, or nil when it does.
    private func checkPackage(_ target: TUFStagedReview.Target, _ package: TUFPackageTarget, keys: [PublicKey], now: Timestamp) -> String? {
        guard let sha256 = target.hashes["sha256"], !target.path.contains("/") else { return nil }
        let file = targetFile("\(sha256).\(target.path)")
        if EncryptedPackage.isEncrypted(file) {
            // Encrypted (FORMAT.md §8): its manifest is for its recipients. With the entry's size
            // and SHA-256 it is the file `repo add` read through a recipient's key, and every
            // device checks the binding again once it has decrypted it.
            guard let size = try? InputFile.open(file, what: "package").size, let digest = try? Digest.compute(fileAt: file, algorithm: .sha256) else {
                return "\(target.path): \(sha256.prefix(16))….\(target.path) cannot be read"
            }
            var wrong: [String] = []
            if size != target.length { wrong.append("it is \(size) bytes, the entry says \(target.length)") }
            if digest.hex != sha256.lowercased() { wrong.append("its SHA-256 is \(digest.hex), the entry says \(sha256)") }
            return wrong.isEmpty ? nil : "\(target.path) (encrypted): \(wrong.joined(separator: "; "))"
        }
        guard let described = try? PackageBinding.describing(file) else {
            return "\(target.path): \(sha256.prefix(16))….\(target.path) is in neither staging/targets/ nor targets/, or not a readable Signet package"
        }
        var wrong: [String] = []
        if Int64(described.size) != target.length { wrong.append("it is \(described.size) bytes, the entry says \(target.length)") }
        if described.sha256 != sha256.lowercased() { wrong.append("its SHA-256 is \(described.sha256), the entry says \(sha256)") }
        if described.manifestSHA256 != package.manifestSHA256 {
            wrong.append("its manifest SHA-256 is \(described.manifestSHA256), the entry says \(package.manifestSHA256)")
        }
        if !Manifest.sameName(described.name, package.name) || described.sequence != package.sequence {
            wrong.append("it is \(described.name) sequence \(described.sequence), the entry says \(package.name) sequence \(package.sequence)")
        }
        if wrong.isEmpty {
            do {
                let verification = try PackageReader.verify(file, policy: TrustPolicy(keys: keys), now: now)
                if !verification.isValid { wrong.append("it does not verify with the targets keys (\(verification.message))") }
            } catch {
                wrong.append("it cannot be verified: \(error)")
            }
        }
        return wrong.isEmpty ? nil : "\(target.path): \(wrong.joined(separator: "; "))"
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage
import SignetCore
import SignetManifest

/// fs-verity for an install (`unpack --verity`, config `verity`; FORMAT.md §3):
/// after every resource is staged and verified, and before the tree is made durable and
/// swapped in, each one becomes an fs-verity file, and the digest the kernel measures must be
/// the one the signed manifest records (`pack --verity`). From then on the kernel checks every
/// read of the file against that digest's Merkle tree, and `reverify` measures the file instead
/// of reading it. A file shared with the replaced tree that already is one is only measured.
struct VerityStep {
    /// What was decided before anything was staged: nil when fs-verity is not asked for.
    enum Decision {
        /// Every file becomes an fs-verity file.
        case enable
        /// `auto`, and fs-verity cannot be used: why (a line of the report).
        case notUsed(String)
    }

    /// Decides before any resource is staged, so that `--verity` fails before a byte is
    /// fetched: the package must record fs-verity digests, and the staging directory's
    /// filesystem must take fs-verity files (an empty file made an fs-verity file and removed).
    static func decide(_ mode: InstallOptions.Verity, manifest: Manifest?, staging: Staging, package: String, destination: String) throws -> Decision? {
        guard mode != .off else { return nil }
        let required = mode == .on
        guard let manifest, manifest.files.allSatisfy({ $0.verity != nil }) else {
            let what =
                manifest == nil
                ? "a bare package has no manifest to record fs-verity digests in"
                : "'\(package)' records no fs-verity digest for some of its files (pack it with signet pack --verity)"
            if required {
                throw SignetError(
                    .usage, "--verity: \(what); install it without --verity, or with --verity-auto to use fs-verity where it can be used", path: package)
            }
            return .notUsed(what)
        }
        switch try probe(staging) {
        case nil: return .enable
        case let reason?:
            if required {
                throw SignetError(
                    .verityUnsupported,
                    "--verity: the filesystem of '\(destination)' does not take fs-verity files (\(reason)); on ext4 it needs the verity feature (tune2fs -O verity, Linux 5.4 or later, 4 KiB blocks), on f2fs and btrfs kernel support; or install with --verity-auto, which installs without it and says so",
                    path: destination)
            }
            return .notUsed("the filesystem of '\(destination)' does not take fs-verity files (\(reason))")
        }
    }

    /// Nil when an empty staged file can be made an fs-verity file; else why not.
    private static func probe(_ staging: Staging) throws -> String? {
        let name = ".signet-verity-probe"
        _ = try staging.createFile(name) // closed at once: no writer may hold it
        defer { staging.removeFile(name) }
        let probe = try staging.openFile(name, access: O_RDONLY)
        do {
            try VerityFile.enable(probe.descriptor)
            return nil
        } catch {
            if VerityFile.isUnsupported(error) { return "the kernel answers \(error.errno.description)" }
            if error.code == EPERM || error.code == EACCES { return "not permitted: \(error.errno.description)" }
            return "\(error.errno.description)"
        }
    }

    /// Makes every resource of the staged tree an fs-verity file and checks its digest against
    /// the manifest's. Returns how many files it enabled (the rest already were, being shared
    /// with the replaced tree).
    static func enable(_ files: [Manifest.File], in staging: Staging, package: String, destination: String) throws -> Int {
        var enabled = 0
        for file in files {
            guard let expected = file.verity else { continue }
            let opened = try staging.openFile(file.path, access: O_RDONLY)
            let fd = opened.descriptor
            var measured = VerityFile.measure(fd)
            if measured == .notVerity {
                do { try VerityFile.enable(fd) } catch {
                    throw SignetError.posix(error, "cannot make '\(file.path)' an fs-verity file beside", path: destination)
                }
                enabled += 1
                measured = VerityFile.measure(fd)
            }
            guard case .digest(let digest) = measured else {
                throw SignetError(.io, "cannot measure the fs-verity digest of '\(file.path)' staged beside '\(destination)' (\(measured))", path: destination)
            }
            guard expected.hex == digest.hexString else {
                throw SignetError(
                    .packageInvalid,
                    "'\(package)' does not verify: the fs-verity digest its manifest records for '\(file.path)' is not the one of its signed content (\(digest.hexString) measured by the kernel); nothing was installed",
                    path: package, entry: file.path)
            }
        }
        return enabled
    }
}

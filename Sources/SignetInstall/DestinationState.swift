import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
internal import SystemPackage
import SignetCore
import SignetManifest
import SignetReverify

/// What is at the destination before installing.
enum DestinationState {
    case absent
    case empty
    /// A tree Signet installed; its manifest (nil if it cannot be read, which --force must then confirm).
    case installed(Manifest?)
    /// A tree unpack `--bare` installed (no manifest).
    case bare
    /// Something else, replaced only with --force.
    case foreign

    /// The package name of an installed tree, when it has a readable manifest.
    var installedName: String? {
        if case .installed(let manifest?) = self { return manifest.name }
        return nil
    }

    static func inspect(_ destination: String, force: Bool) throws -> DestinationState {
        let present: stat?
        do { present = try Paths.lstatIfPresent(destination) } catch {
            throw SignetError.posix(error, "cannot use destination", path: destination)
        }
        guard let info = present else { return .absent }
        guard info.st_mode & S_IFMT != S_IFLNK else {
            throw SignetError(.destinationRefused, "destination '\(destination)' is a symbolic link; give the real directory", path: destination)
        }
        guard info.st_mode & S_IFMT == S_IFDIR else {
            throw SignetError(.destinationRefused, "destination '\(destination)' exists and is not a directory", path: destination)
        }
        let directory: OwnedDescriptor
        let names: [DirectoryEntries.Entry]
        do {
            directory = try Paths.open(destination, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        } catch {
            throw SignetError.posix(error, "cannot read the destination directory", path: destination)
        }
        let fd = directory.descriptor
        // An unreadable directory would list as empty through readdir's silence: the walker throws.
        do { names = try DirectoryEntries.list(fd) } catch let failure as SystemCallFailure {
            throw SignetError.posix(failure, "cannot read the destination directory", path: destination)
        }
        if names.isEmpty { return .empty }
        // Absent, a link, not a file, too large or not a manifest: not a tree Signet installed
        // (--force decides). A read error is an I/O error, never taken for "foreign".
        let bytes: [UInt8]?
        do {
            bytes = try InputFile.readBeneath(fd, TreeLayout.manifest, rootPath: destination, what: "installed manifest", limit: 64 << 20)
        } catch let error as SignetError where error.code == .malformedInput {
            bytes = nil
        }
        if let bytes {
            let manifest = try? Manifest.parse(bytes)
            if manifest != nil || force { return .installed(manifest) }
        } else if Reverifier.isBareTree(fd) {
            // A tree unpack --bare installed: Signet's, with no manifest (no rollback check);
            // unless its files say they came from a signed manifest (the manifest's signature
            // removed and the bare marker added: that would skip every check the manifest gives).
            if let origin = Reverifier.manifestOrigin(of: fd), !force {
                throw SignetError(
                    .relabelledTree,
                    "'\(destination)' is marked as a bare tree, but its files were installed from the signed package '\(origin.name)' sequence \(origin.sequence) (their user.signet.meta says so): its manifest or manifest signature was removed. Reinstall it, or pass --force to replace it",
                    path: destination)
            }
            return .bare
        }
        guard force else {
            throw SignetError(
                .destinationRefused,
                "destination '\(destination)' is not empty and holds no tree Signet installed (no readable .signet/manifest.json); choose a new or empty directory, or pass --force to replace it",
                path: destination)
        }
        return .foreign
    }
}

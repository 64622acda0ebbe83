#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A file's identity (device and inode): how Signet tells whether an output would replace one
/// of its inputs, whatever names, `./` prefixes, hard or symbolic links lead to them.
package struct FileIdentity: Hashable {
    let device: UInt64
    let inode: UInt64

    /// The identity of what `path` names (`followLinks: false`: the link itself), or nil when
    /// nothing is there.
    package static func of(_ path: String, followLinks: Bool = true) -> FileIdentity? {
        var info = stat()
        let result = followLinks ? stat(path, &info) : lstat(path, &info)
        guard result == 0 else { return nil }
        return FileIdentity(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
    }

    /// Refuses (exit 2) any target that is, or leads to, one of `inputs` (files to read, the
    /// key, certificates), or that another target already names: writing it would destroy an
    /// input, or write two results to one file. `what` names the option in the message.
    package static func refuseOverwriting(targets: [String], inputs: [(path: String, role: String)], what: String) throws {
        var inputIdentities: [FileIdentity: (path: String, role: String)] = [:]
        for input in inputs {
            if let identity = of(input.path), inputIdentities[identity] == nil { inputIdentities[identity] = input }
        }
        var claimed: [FileIdentity: String] = [:]
        for target in targets {
            // The name itself, and what it leads to through a link.
            let identities = [of(target, followLinks: false), of(target)].compactMap { $0 }
            for identity in identities {
                if let input = inputIdentities[identity] {
                    throw SignetError(
                        .usage,
                        "\(what) '\(target)' is the same file as the \(input.role) '\(input.path)'; writing it would destroy that file. Choose another output path",
                        path: target)
                }
                if let other = claimed[identity] {
                    throw SignetError(.usage, "\(what) '\(target)' and '\(other)' are the same file; each output needs its own path", path: target)
                }
            }
            for identity in identities { claimed[identity] = target }
        }
        // Targets that do not exist yet can still be one file: the same name in the same directory.
        var places = Set<String>()
        for target in targets {
            var trimmed = target
            while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
            let parent = of(AtomicFile.parentDirectory(of: trimmed))
            let name = trimmed.split(separator: "/").last.map(String.init) ?? trimmed
            let place = parent.map { "\($0.device):\($0.inode)/" } ?? AtomicFile.parentDirectory(of: trimmed) + "/"
            guard places.insert(place + name).inserted else {
                throw SignetError(.usage, "\(what) '\(target)' is named twice; each output needs its own path", path: target)
            }
        }
    }
}

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import SignetCore

/// The one rule for files that convey trust (FORMAT.md §5 "Files that convey trust"): a
/// configuration, trusted keys and certificates, trust directories and their files, TLS roots,
/// pins, revocation lists, a trust salt, the install state. Another user who can change any
/// of them owns what Signet installs, so each is refused, before anything is done, when:
///
/// - it (or, for a folder, anything in it) is owned by a user other than root or the one
///   running Signet, or is writable by group or others;
/// - any folder on the way to it (as given, and after symbolic links are resolved) is owned by
///   another user, or is writable by group or others without the sticky bit (`/tmp` is fine:
///   others may not rename or remove what they do not own there); a symbolic link on the way
///   must itself belong to root or this user.
///
/// A path that does not exist is left to the reader, which says so in its own words.
package enum TrustedInput {
    /// Most entries of a folder input that are looked at (a CA folder such as /etc/ssl/certs
    /// holds a few hundred).
    static let maximumEntries = 100_000

    /// Checks `path`, named in messages as `what` (the option, e.g. "--trust-dir"); a folder
    /// with what it holds, unless `contents` is false.
    package static func check(_ path: String, what: String, contents: Bool = true) throws {
        var info = stat()
        guard stat(path, &info) == 0 else { return }
        try checkWay(to: path, what: what)
        try checkOwnAndMode(path, info, what: what, input: path)
        if contents, info.st_mode & S_IFMT == S_IFDIR {
            var seen = 0
            try checkContents(of: path, what: what, input: path, depth: 0, seen: &seen)
        }
    }

    /// A file Signet may create (the install state): the file if it exists, else the folder
    /// it will be made in (not what else that folder holds).
    package static func check(creating path: String, what: String) throws {
        var info = stat()
        if lstat(path, &info) == 0 { return try check(path, what: what) }
        let slash = path.lastIndex(of: "/")
        let parent = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        // Named as the folder it is, not as the file (a tmpfs folder was called --state).
        try check(parent, what: "the folder of \(what) (where '\(path)' is to be made)", contents: false)
    }

    /// Each of `paths` (an option given several times).
    package static func check(_ paths: [String], what: String) throws {
        for path in paths { try check(path, what: what) }
    }

    private static func refuse(_ path: String, what: String, input: String, _ problem: String, fix: String) -> SignetError {
        let subject = path == input ? "'\(path)'" : "'\(input)' (through '\(path)')"
        return SignetError(
            .insecureFile, "\(what) \(subject) conveys trust, but \(problem): another user could change what Signet trusts, so it is not used. Fix: \(fix)",
            path: input)
    }

    private static func isTrustedOwner(_ uid: uid_t) -> Bool { uid == 0 || uid == geteuid() }

    /// The file or folder itself: owner and write bits.
    private static func checkOwnAndMode(_ path: String, _ info: stat, what: String, input: String) throws {
        guard isTrustedOwner(info.st_uid) else {
            throw refuse(
                path, what: what, input: input, "it is owned by uid \(info.st_uid)\(userName(info.st_uid))",
                fix: "chown root '\(path)' (or the user that runs signet)")
        }
        guard info.st_mode & 0o022 == 0 else {
            throw refuse(
                path, what: what, input: input, "it may be written by \(writers(info.st_mode)) (mode 0\(String(info.st_mode & 0o7777, radix: 8)))",
                fix: "chmod go-w '\(path)'")
        }
    }

    /// The folders on the way to `path`, lexically as given (with each symbolic link's owner)
    /// and after every link is resolved.
    private static func checkWay(to path: String, what: String) throws {
        var ways = [absolute(path)]
        if let resolved = realpath(path, nil) {
            ways.append(String(cString: resolved))
            free(resolved)
        }
        for way in ways {
            let parts = way.split(separator: "/").map(String.init)
            var prefix = ""
            for (index, part) in ([""] + parts).enumerated() {
                prefix = index == 0 ? "/" : (prefix == "/" ? "/" : prefix + "/") + part
                let last = index == parts.count
                var info = stat()
                guard lstat(prefix, &info) == 0 else { break } // the reader reports it
                if info.st_mode & S_IFMT == S_IFLNK {
                    guard isTrustedOwner(info.st_uid) else {
                        throw refuse(
                            prefix, what: what, input: path, "the symbolic link '\(prefix)' belongs to uid \(info.st_uid)\(userName(info.st_uid))",
                            fix: "replace the link with one root owns, or give the real path")
                    }
                    break // the resolved way is walked too
                }
                guard !last, info.st_mode & S_IFMT == S_IFDIR else { continue }
                guard isTrustedOwner(info.st_uid) else {
                    throw refuse(
                        prefix, what: what, input: path, "the folder '\(prefix)' on the way to it belongs to uid \(info.st_uid)\(userName(info.st_uid))",
                        fix: "keep it in a folder root owns, or chown root '\(prefix)'")
                }
                if info.st_mode & 0o022 != 0 && info.st_mode & S_ISVTX == 0 {
                    throw refuse(
                        prefix, what: what, input: path,
                        "the folder '\(prefix)' on the way to it may be written by \(writers(info.st_mode)) (mode 0\(String(info.st_mode & 0o7777, radix: 8)), no sticky bit), so its entries can be replaced",
                        fix: "chmod go-w '\(prefix)' (or chmod +t '\(prefix)' for a shared folder)")
                }
            }
        }
    }

    /// Everything in a folder input (a trust directory's channels, a CA folder's links and
    /// certificates), a few levels deep.
    private static func checkContents(of directory: String, what: String, input: String, depth: Int, seen: inout Int) throws {
        guard depth < 4, let stream = opendir(directory) else { return }
        defer { closedir(stream) }
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard name != "." && name != ".." else { continue }
            seen += 1
            guard seen <= maximumEntries else { return }
            let child = directory + "/" + name
            var link = stat(), info = stat()
            guard lstat(child, &link) == 0 else { continue }
            if link.st_mode & S_IFMT == S_IFLNK {
                guard isTrustedOwner(link.st_uid) else {
                    throw refuse(
                        child, what: what, input: input, "the symbolic link '\(child)' in it belongs to uid \(link.st_uid)\(userName(link.st_uid))",
                        fix: "remove it, or chown -h root '\(child)'")
                }
                // What it points to: readers follow it.
                guard stat(child, &info) == 0 else { continue }
                if info.st_mode & S_IFMT == S_IFREG {
                    try checkWay(to: child, what: what)
                    try checkOwnAndMode(child, info, what: what, input: input)
                }
                continue
            }
            try checkOwnAndMode(child, link, what: what, input: input)
            if link.st_mode & S_IFMT == S_IFDIR {
                try checkContents(of: child, what: what, input: input, depth: depth + 1, seen: &seen)
            }
        }
    }

    private static func writers(_ mode: mode_t) -> String {
        switch (mode & 0o020 != 0, mode & 0o002 != 0) {
        case (true, true): "group and others"
        case (true, false): "its group"
        default: "others"
        }
    }

    private static func userName(_ uid: uid_t) -> String {
        guard let entry = getpwuid(uid), let name = entry.pointee.pw_name else { return "" }
        return " (\(String(cString: name)))"
    }

    private static func absolute(_ path: String) -> String {
        if path.hasPrefix("/") { return path }
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        guard getcwd(&buffer, buffer.count) != nil else { return path }
        let directory = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return (directory == "/" ? "" : directory) + "/" + path
    }
}

; Inno Setup 6 script: the Windows installer for the PyInstaller folder (packaging/botpsy.spec).
;
;   iscc /DAppVersion=0.1.0 /DDistDir=C:\path\to\dist\botpsy-desktop /DOutputDir=C:\out ^
;        packaging\windows\botpsy.iss
;
; Installs for the current user without admin rights (or for everyone, when chosen in the
; first page), adds a Start menu entry (and a desktop icon if asked), can start BotPsy in the
; tray at login, and registers an uninstaller. Uninstalling removes the program and the login
; item; settings, conversations and models in %APPDATA% and %LOCALAPPDATA%\botpsy-desktop stay.
; Silent install for CI or IT: BotPsy-...-setup.exe /VERYSILENT /CURRENTUSER [/TASKS=startatlogin]

#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif
#ifndef DistDir
  #define DistDir "..\..\dist\botpsy-desktop"
#endif
#ifndef OutputDir
  #define OutputDir "..\..\dist"
#endif

[Setup]
AppId={{6F0B8E2C-5A47-4C1B-9E3D-2B7A1C9D4E58}
AppName=BotPsy
AppVersion={#AppVersion}
AppVerName=BotPsy {#AppVersion}
AppPublisher=botpsy-desktop
DefaultDirName={autopf}\BotPsy
DefaultGroupName=BotPsy
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
MinVersion=10.0
OutputDir={#OutputDir}
OutputBaseFilename=BotPsy-{#AppVersion}-windows-x64-setup
SetupIconFile=..\icons\botpsy.ico
UninstallDisplayIcon={app}\botpsy-desktop.exe
UninstallDisplayName=BotPsy
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern
; close a running BotPsy (Restart Manager) before files are replaced or removed
CloseApplications=yes
RestartApplications=no

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked
Name: "startatlogin"; Description: "Start BotPsy in the tray when I log in"; GroupDescription: "Login:"; Flags: unchecked

[Files]
Source: "{#DistDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\BotPsy"; Filename: "{app}\botpsy-desktop.exe"; Comment: "Private desktop assistant"
Name: "{autoprograms}\BotPsy quick command"; Filename: "{app}\botpsy-desktop.exe"; Parameters: "--quick"
Name: "{autodesktop}\BotPsy"; Filename: "{app}\botpsy-desktop.exe"; Tasks: desktopicon

[Registry]
; The login item is the value BotPsy's own setting writes (botpsy_desktop/core/autostart.py):
; HKCU\...\Run "BotPsy" = "<app>\botpsy-desktop.exe" --minimized. Set here when the task is
; chosen; the second entry creates nothing and removes the value on uninstall, however it was set.
Root: HKCU; Subkey: "Software\Microsoft\Windows\CurrentVersion\Run"; ValueType: string; ValueName: "BotPsy"; ValueData: """{app}\botpsy-desktop.exe"" --minimized"; Tasks: startatlogin
Root: HKCU; Subkey: "Software\Microsoft\Windows\CurrentVersion\Run"; ValueType: none; ValueName: "BotPsy"; Flags: uninsdeletevalue
; Notifications with buttons (desktop-notifier, botpsy_desktop/core/native_notifications.py)
; register the app's toast identity "BotPsy" under the user's AppUserModelId at the first one;
; created by the app, not here, and removed on uninstall.
Root: HKCU; Subkey: "Software\Classes\AppUserModelId\BotPsy"; Flags: dontcreatekey uninsdeletekey

[Run]
Filename: "{app}\botpsy-desktop.exe"; Description: "{cm:LaunchProgram,BotPsy}"; Flags: nowait postinstall skipifsilent
